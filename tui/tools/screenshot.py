"""Make docs/live-view.svg: the live view of a canned 4-rank, input-bound run.

    .venv/bin/python tui/tools/screenshot.py [OUT.svg] [--size 130x40]

The run comes from the viewer tests' canned records (tests/tui/fixtures.py), so the picture is the
same every time and needs no training job; it never imports torch.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "tui"))

from fixtures import snapshot_of, until  # noqa: E402

from traceml_tui.app import TraceMLApp  # noqa: E402


async def shoot(out: Path, size: tuple[int, int]) -> None:
    app = TraceMLApp(None, source=snapshot_of())
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.main.shown is not None)
        await pilot.pause()
        app.save_screenshot(out.name, str(out.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=REPO / "docs" / "live-view.svg")
    parser.add_argument("--size", default="130x40", help="terminal size, COLSxROWS")
    args = parser.parse_args()
    cols, rows = (int(n) for n in args.size.split("x"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(shoot(args.out, (cols, rows)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
