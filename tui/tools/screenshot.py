"""Make docs/live-view.svg: the live view of a real run of examples/input_bound.py.

    .venv/bin/python tui/tools/screenshot.py [OUT.svg] [--size 130x42] [--steps 400]

(`make screenshot` runs it.) It starts `traceml run --no-live examples/input_bound.py` in a
private runtime dir, attaches the real viewer headless once the run has made `--steps` steps,
saves the screen as SVG, then stops the script. Nothing is canned: the numbers are that run's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from traceml_tui.app import TraceMLApp

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "input_bound.py"
RUN_ID = "input_bound-screenshot"
WAIT_S = 120.0


async def shoot(out: Path, size: tuple[int, int], runtime: Path, steps: int) -> None:
    app = TraceMLApp(RUN_ID, runtime_dir=runtime)
    async with app.run_test(size=size) as pilot:
        deadline = time.monotonic() + WAIT_S
        while not _ready(app, steps):
            if time.monotonic() > deadline:
                raise SystemExit(f"the run never reached {steps} steps on screen")
            await pilot.pause(0.2)
        # The charts are rebuilt at most once a second: shoot when both show the header's step.
        while not _consistent(app):
            if time.monotonic() > deadline:
                raise SystemExit("the charts never caught up with the header")
            await pilot.pause(0.02)
        app.save_screenshot(out.name, str(out.parent))


def _consistent(app: TraceMLApp) -> bool:
    shown, step, memory = app.main.shown, app.main.chart.chart, app.main.memory.chart
    if shown is None or step.data is None or memory.data is None:
        return False
    steps = shown.view.total_steps
    return (
        step.current
        and memory.current
        and step.data.points[-1].step == steps
        and memory.data.points[-1][0] == steps
    )


def _ready(app: TraceMLApp, steps: int) -> bool:
    shown = app.main.shown
    return shown is not None and shown.view.total_steps >= steps


def start_run(runtime: Path, steps: int, summary: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, TRACEML_RUNTIME_DIR=str(runtime))
    cmd = [sys.executable, "-m", "traceml", "run", "--no-live", "--run-id", RUN_ID]
    cmd += ["--summary", str(summary), str(EXAMPLE), "--steps", str(steps * 20)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for_files(runtime: Path) -> None:
    """The viewer attaches to a run whose files exist: wait for the script to write them."""
    from traceml.errors import RunNotFoundError
    from traceml.transport.subscribe.runs import resolve_run

    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            resolve_run(RUN_ID, runtime)
            return
        except RunNotFoundError:
            time.sleep(0.2)
    raise SystemExit("the example never started")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=REPO / "docs" / "live-view.svg")
    parser.add_argument("--size", default="130x42", help="terminal size, COLSxROWS")
    parser.add_argument("--steps", type=int, default=400, help="steps made before the shot")
    args = parser.parse_args()
    cols, rows = (int(n) for n in args.size.split("x"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="traceml-shot-") as tmp:
        runtime = Path(tmp) / "rt"
        runtime.mkdir(mode=0o700)
        run = start_run(runtime, args.steps, Path(tmp) / "final_summary.json")
        try:
            wait_for_files(runtime)
            asyncio.run(shoot(args.out.absolute(), (cols, rows), runtime, args.steps))
        finally:
            run.terminate()
            run.wait(30)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
