"""Run one compatibility case twice, bare and under `traceml run`, and compare what a user sees.

A case is a script in `tests/compat/scripts/`. "Bare" is `python script.py` with TRACEML_MODE=off,
which makes every TraceML call in the script a no-op (the scripts call `traceml.trace_step` as
real loops do, and without "off" that call would start TraceML). "Traced" is
`python -m traceml run --no-live --summary <tmp>/traced/final_summary.json script.py`. Both run
at once, as real subprocesses, each in its own session and working directory, with the same
seed and environment. `Pair.assert_same()` then checks that TraceML changed nothing the user can
see: exit code, stdout (final loss, parameter hash) and stderr, once TraceML's own lines are taken
out of the traced stderr. What counts as TraceML's own lines is exactly this (`script_stderr`):

- the card at the very end, which the launcher prints after the script has ended: the text
  `render_card(summary)` of the summary file it wrote, a blank line, then
  `traceml: summary written to <path>`;
- progress lines (`--no-live` prints one every 5 s): `traceml: waiting for the first step` or
  `traceml: step N · ... · KIND (severity)`.

Anything else on the traced stderr (a TraceML warning, an extra traceback frame) is a difference.
The exit code is compared as a shell reports it (128 + N after a death by signal N) and, apart,
whether the process itself died of the signal. Every process of a run's session (DataLoader
workers, the job collector, a tracker's service) must be gone within LINGER_S of its end, and the
bare run must have written no summary.

    pair = run_case("grad_accum.py", tmp_path=tmp_path)
    pair.assert_same()
    assert pair.summary["step_time"]["diagnosis"] not in {"HOST_BOUND", "OPTIMIZER_BOUND"}
"""

from __future__ import annotations

import difflib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from traceml.analysis.render import render_card
from traceml.analysis.schema import validate_summary
from traceml.analysis.summary import load_summary

SCRIPTS = Path(__file__).resolve().with_name("scripts")
PROGRESS = re.compile(
    r"traceml: (waiting for the first step"
    r"|step \d+ · .+ · [A-Z_]+ \((info|warning|critical)\))\n",
)
"""A progress line of `traceml run --no-live`, newline included."""
BASE_ENV = {
    "OMP_NUM_THREADS": "1",  # two shared cores; also makes CPU matmuls order-stable
    "PYTHONHASHSEED": "0",
    "PYTHONUNBUFFERED": "1",  # so a test can wait for a line the script printed
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "DISABLE_MLFLOW_INTEGRATION": "TRUE",
}
"""Set for both runs: offline, quiet, deterministic."""
LINGER_S = 15.0
"""How long a finished run's leftover processes (DataLoader workers, collectors) may take to go."""


@dataclass(frozen=True)
class Run:
    """One finished run of a case script."""

    kind: str
    """"bare" or "traced"."""
    returncode: int
    """What a shell would report: the exit status, or 128 + N for a death by signal N."""
    signalled: bool
    """True when the top process itself died of a signal (`returncode` is then 128 + N)."""
    stdout: str
    stderr: str
    """Raw stderr, with the run's working directory replaced by `<cwd>`."""
    cwd: Path
    summary_path: Path | None
    """Where the traced run was told to write its summary; None for the bare run."""
    leftovers: tuple[str, ...]
    """Processes of the run's session still alive LINGER_S after it ended (`name pid`)."""

    @property
    def summary(self) -> dict[str, Any]:
        """The traced run's summary, schema-checked; fails the test when there is none."""
        assert self.summary_path is not None, "a bare run writes no summary"
        assert self.summary_path.exists(), f"no summary written\n{self.stderr[-3000:]}"
        data = load_summary(self.summary_path)
        validate_summary(data)
        return data

    @property
    def script_stderr(self) -> str:
        """stderr without TraceML's own lines (see the module docstring)."""
        text = self.stderr
        if self.summary_path is not None and self.summary_path.exists():
            card = render_card(load_summary(self.summary_path))
            where = str(self.summary_path).replace(str(self.cwd), "<cwd>")
            tail = f"{card}\ntraceml: summary written to {where}\n"
            assert text.endswith(tail), f"the card is not the end of stderr:\n{text[-3000:]}"
            text = text[: -len(tail)]
        return PROGRESS.sub("", text)

    def lines(self, prefix: str) -> list[str]:
        """stdout lines starting with `prefix`, prefix removed."""
        return [ln[len(prefix) :] for ln in self.stdout.splitlines() if ln.startswith(prefix)]


@dataclass(frozen=True)
class Pair:
    """The same case run bare and traced."""

    bare: Run
    traced: Run

    @property
    def summary(self) -> dict[str, Any]:
        return self.traced.summary

    def assert_same(self, *, volatile: str | None = None) -> None:
        """TraceML changed nothing the user sees.

        Args:
            volatile: A regex of lines (stdout and stderr) that differ between any two runs,
                such as a framework's own timing printout; they are dropped from both before
                comparing. Use sparingly: everything else must match to the byte.
        """
        bare, traced = self.bare, self.traced
        how = {True: "killed by signal", False: "exit"}
        assert (traced.returncode, traced.signalled) == (bare.returncode, bare.signalled), (
            f"{how[traced.signalled]} {traced.returncode} traced,"
            f" {how[bare.signalled]} {bare.returncode} bare"
            f"\n--- bare stderr\n{bare.stderr[-2500:]}\n--- traced stderr\n{traced.stderr[-2500:]}"
        )
        same_text("stdout", _drop(bare.stdout, volatile), _drop(traced.stdout, volatile))
        same_text(
            "stderr (TraceML's card taken out)",
            _drop(bare.stderr, volatile),
            _drop(traced.script_stderr, volatile),
        )
        for run in (bare, traced):
            assert not run.leftovers, f"{run.kind} run left processes behind: {run.leftovers}"
        assert not (bare.cwd / "traceml-runs").exists(), "TRACEML_MODE=off wrote a summary"


def same_text(what: str, bare: str, traced: str) -> None:
    """Equal, or an AssertionError showing the difference as a unified diff."""
    if bare == traced:
        return
    diff = difflib.unified_diff(
        bare.splitlines(), traced.splitlines(), "bare", "traced", lineterm="", n=2
    )
    raise AssertionError(f"{what} differs:\n" + "\n".join(diff))


def _drop(text: str, volatile: str | None) -> str:
    if volatile is None:
        return text
    pattern = re.compile(volatile)
    return "".join(ln for ln in text.splitlines(keepends=True) if not pattern.search(ln))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def case_env(cwd: Path, extra: Mapping[str, str] | None, traced: bool) -> dict[str, str]:
    """The test's environment without TraceML's own variables (but its private runtime dir)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEML_")}
    env["TRACEML_RUNTIME_DIR"] = os.environ["TRACEML_RUNTIME_DIR"]
    env.update(BASE_ENV, HOME=str(cwd), WANDB_DIR=str(cwd), HF_HOME=str(cwd / "hf"))
    port = str(free_port())
    env.update(MASTER_PORT=port, PET_MASTER_PORT=port)
    if not traced:
        env["TRACEML_MODE"] = "off"
    env.update(extra or {})
    return env


def command(script: Path, args: Sequence[str], nproc: int, summary: Path | None) -> list[str]:
    """The bare command (summary None) or the same one under `traceml run`."""
    if summary is None:
        launch = ["-m", "torch.distributed.run", f"--nproc-per-node={nproc}"] if nproc else []
        return [sys.executable, *launch, str(script), *args]
    traced = ["-m", "traceml", "run", "--no-live", "--summary", str(summary)]
    traced += [f"--nproc-per-node={nproc}"] if nproc else []
    return [sys.executable, *traced, str(script), *args]


class Live:
    """A started run: its process, session and output files (files, not pipes, so a script
    that prints a lot never blocks on a reader that is busy with the other run)."""

    def __init__(self, kind: str, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.kind, self.cwd = kind, cwd
        cwd.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = cwd / "stdout.txt", cwd / "stderr.txt"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.sid = self.proc.pid

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_line(self, prefix: str, deadline: float) -> None:
        """Wait until the script printed a line starting with `prefix`."""
        while not any(ln.startswith(prefix) for ln in self.stdout().splitlines()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.kind} run never printed {prefix!r}:\n{self.stdout()}")
            time.sleep(0.05)

    def finish(self, deadline: float, summary: Path | None, linger: float = LINGER_S) -> Run:
        try:
            code = self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            tail = self.err_path.read_text(errors="replace")[-3000:]
            raise AssertionError(f"{self.kind} run timed out:\n{tail}") from None
        stderr = self.err_path.read_text(errors="replace").replace(str(self.cwd), "<cwd>")
        return Run(
            kind=self.kind,
            returncode=128 - code if code < 0 else code,
            signalled=code < 0,
            stdout=self.stdout(),
            stderr=stderr,
            cwd=self.cwd,
            summary_path=summary,
            leftovers=session_leftovers(self.sid, linger),
        )

    def kill(self) -> None:
        for proc in session_members(self.sid):
            try:
                proc.kill()
            except psutil.Error:
                pass


def session_members(sid: int) -> list[psutil.Process]:
    """Live (not zombie) processes of session `sid`."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def session_leftovers(sid: int, grace: float) -> tuple[str, ...]:
    """Processes still in the session after `grace` seconds; killed, so none outlives the test."""
    deadline = time.monotonic() + grace
    while (members := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    names = []
    for proc in members:
        try:
            names.append(f"{proc.name()} {proc.pid}")
            proc.kill()
        except psutil.Error:
            continue
    return tuple(names)


def start(
    kind: str,
    script: str,
    args: Sequence[str],
    tmp_path: Path,
    nproc: int,
    env: Mapping[str, str] | None,
) -> tuple[Live, Path | None]:
    cwd = tmp_path / kind
    summary = cwd / "final_summary.json" if kind == "traced" else None
    argv = command(SCRIPTS / script, args, nproc, summary)
    return Live(kind, argv, cwd, case_env(cwd, env, kind == "traced")), summary


def run_case(
    script: str,
    *args: str,
    tmp_path: Path,
    nproc: int = 0,
    env: Mapping[str, str] | None = None,
    timeout: float = 90.0,
    interrupt_on: str | None = None,
    linger: float = LINGER_S,
) -> Pair:
    """Run `scripts/<script> args` bare and traced at the same time; return both outcomes.

    Args:
        script: File name in tests/compat/scripts/.
        tmp_path: The test's tmp_path; each run works in its own folder below it.
        nproc: Ranks: 0 runs `python script.py`, N runs it under torchrun (`traceml run
            --nproc-per-node N` when traced).
        env: Extra environment for both runs.
        timeout: Seconds both runs may take together.
        interrupt_on: Once a run prints a line starting with this, it gets SIGINT, as
            `kill -INT <pid>` of the command the user started would send it (the launcher
            for the traced run, which passes it on to the script).
        linger: Seconds a run's leftover processes get to exit before they count as left.
    """
    deadline = time.monotonic() + timeout
    runs = [start(kind, script, args, tmp_path, nproc, env) for kind in ("bare", "traced")]
    try:
        if interrupt_on is not None:
            for live, _ in runs:
                live.wait_line(interrupt_on, deadline)
                live.proc.send_signal(signal.SIGINT)
        bare, traced = (live.finish(deadline, summary, linger) for live, summary in runs)
    finally:
        for live, _ in runs:
            live.kill()
    return Pair(bare, traced)


def run_traced(script: str, *args: str, tmp_path: Path, timeout: float = 90.0) -> Run:
    """Only the traced run, for cases with nothing to compare against (a tracker's files)."""
    live, summary = start("traced", script, args, tmp_path, 0, None)
    try:
        return live.finish(time.monotonic() + timeout, summary)
    finally:
        live.kill()


def phases(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """`{"forward": 31.0, "dataloader": None, ...}` from a summary's step_time section."""
    step = summary["step_time"]
    return {k[: -len("_pct")]: v for k, v in step.items() if k.endswith("_pct")}
