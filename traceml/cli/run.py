"""`traceml run [opts] script.py [args]`: run a script instrumented and report on it.

The launcher never imports torch: the script runs in a child process (`traceml.bootstrap`, or
torchrun for several ranks) that starts TraceML itself. The launcher checks what it can before
the script starts (script exists and compiles, summary folder writable), passes Ctrl-C and
SIGTERM to the child, shows progress or the live view, and prints the summary card at the end.
The exit code is the script's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from traceml.errors import ConfigError, TraceMLError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a training script instrumented",
        description="Run SCRIPT as `python SCRIPT ARGS` would, instrumented by TraceML.",
    )
    p.add_argument("--no-live", action="store_true", help="print progress lines, no live view")
    p.add_argument("--summary", metavar="PATH", help="where to write final_summary.json")
    p.add_argument("--mode", default="auto", choices=("auto", "manual", "off"))
    p.add_argument(
        "--nproc-per-node", type=int, default=0, metavar="N", help="launch N ranks through torchrun"
    )
    p.add_argument("--run-id", help="force the run id (default: derived)")
    p.add_argument(
        "--listen",
        choices=("ipc", "tcp"),
        default=None,
        help="ipc in the private runtime dir (default), or tcp on 127.0.0.1 with CURVE",
    )
    p.add_argument("--insecure", action="store_true", help="allow tcp without CURVE")
    p.add_argument("script", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


def check_script(path: str) -> Path:
    """The script must exist and compile: say so in one line before anything starts."""
    script = Path(path)
    if not script.is_file():
        raise ConfigError(f"no such script: {path} (check the path and the working directory)")
    try:
        source = script.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e
    try:
        compile(source, str(script), "exec")
    except SyntaxError as e:
        raise ConfigError(
            f"{path}:{e.lineno}: {e.msg} (the script has a syntax error and was not started)"
        ) from e
    return script


def check_summary_path(path: Path) -> Path:
    """The summary's folder must be creatable and writable, or the run would lose its summary."""
    folder = path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"summary folder {folder} is not a directory: choose another --summary")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"cannot write the summary to {path}: {existing} is not writable;"
            " choose another --summary"
        )
    return path


def want_live(args: argparse.Namespace) -> bool:
    """The live view needs a terminal on both ends; otherwise plain progress lines."""
    return not args.no_live and sys.stdout.isatty() and sys.stdin.isatty()


def inside_rank() -> bool:
    """True when torchrun (or another launcher) already made this process a rank."""
    env = os.environ
    return "TORCHELASTIC_RUN_ID" in env or all(
        k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    )


def child_env(run_id: str, summary: Path, args: argparse.Namespace, live: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TRACEML_RUN_ID=run_id,
        TRACEML_SUMMARY=str(summary),
        TRACEML_LAUNCHER="1",
        TRACEML_MODE=args.mode,
        TRACEML_PROGRESS="0" if live else "1",
    )
    if live:
        env["PYTHONUNBUFFERED"] = "1"  # the log panel shows output as the script prints it
    if args.listen:
        env["TRACEML_LISTEN"] = args.listen
    if args.insecure:
        env["TRACEML_INSECURE"] = "1"
    return env


def child_command(args: argparse.Namespace) -> list[str]:
    target = ["-m", "traceml.bootstrap", args.script, *args.args]
    if args.nproc_per_node > 0:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={args.nproc_per_node}",
            *target,
        ]
    return [sys.executable, *target]


def wait_child(proc: subprocess.Popen[bytes], *, own_session: bool = False) -> int:
    """Wait for the script; SIGTERM is passed on, and Ctrl-C too unless the terminal gives it
    to the script itself (its foreground group: not when it runs in a session of its own)."""

    def forward(signum: int, _frame: Any) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    terminal_sends = os.isatty(0) and not own_session
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN if terminal_sends else forward)
    old_term = signal.signal(signal.SIGTERM, forward)
    try:
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    return 128 - code if code < 0 else code


def print_card(summary_path: Path) -> None:
    from traceml.analysis.render import render_card
    from traceml.analysis.summary import load_summary

    try:
        summary = load_summary(summary_path, full_check=False)  # our child wrote it
        card = render_card(summary)
    except TraceMLError as err:
        print(f"traceml: no summary to show ({err.msg})", file=sys.stderr)
        return
    except Exception as err:  # noqa: BLE001 - never turn the script's exit code into ours
        print(f"traceml: cannot show the summary ({type(err).__name__}: {err})", file=sys.stderr)
        return
    print(card, file=sys.stderr)
    print(f"traceml: summary written to {summary_path}", file=sys.stderr)


def run_in_rank(args: argparse.Namespace) -> int:
    """`torchrun ... -m traceml run script.py`: this process is already a rank; run it here."""
    from traceml.bootstrap import main as bootstrap

    os.environ.setdefault("TRACEML_MODE", args.mode)
    if args.summary:
        os.environ.setdefault("TRACEML_SUMMARY", str(Path(args.summary).absolute()))
    if args.run_id:
        os.environ.setdefault("TRACEML_RUN_ID", args.run_id)
    os.environ.setdefault("TRACEML_PROGRESS", "1")
    return bootstrap([args.script, *args.args])


def start_live(cmd: list[str], env: dict[str, str], run_id: str) -> int:
    """Start the script with its output in the run dir's log, then show the live view.

    The script gets its own session, so it survives the terminal when the user detaches; the
    view passes Ctrl-C on to it. The script starts before the view's modules are imported (a
    quarter of a second, which would otherwise delay the script's own start).
    """
    from traceml.transport.runfiles.rundir import RunDir, resolve_runtime_dir

    run_dir = RunDir(resolve_runtime_dir(None), run_id).create()
    with open(run_dir.log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        from traceml_tui.launch import run_live
    except Exception as err:  # noqa: BLE001 - the script runs already: never leave it orphaned
        print(
            f"traceml: the live view cannot start ({type(err).__name__}: {err}); the script's"
            f" output goes to {run_dir.log_path}. Waiting for it to end.",
            file=sys.stderr,
        )
        return wait_child(proc, own_session=True)
    code = run_live(run_id, run_dir.log_path, proc)
    return -1 if proc.poll() is None else code


def run(args: argparse.Namespace) -> int:
    from traceml.transport.runfiles.runid import derive_run_id

    script = check_script(args.script)
    if inside_rank() and args.nproc_per_node == 0:
        return run_in_rank(args)
    run_id = args.run_id or derive_run_id(script.name)
    default = Path.cwd() / "traceml-runs" / run_id / "final_summary.json"
    summary = check_summary_path(Path(args.summary).absolute() if args.summary else default)
    live = want_live(args)
    env = child_env(run_id, summary, args, live)
    started = time.time()
    if live:
        code = start_live(child_command(args), env, run_id)
        if code < 0:
            return 0  # detached: the script runs on and will write its own summary
    else:
        proc = subprocess.Popen(child_command(args), env=env)
        code = wait_child(proc)
    if code == KILLED_EXIT:
        print("traceml: the script was killed by SIGKILL (out of memory?)", file=sys.stderr)
        if not summary.exists():
            write_killed_summary(summary, run_id, args, started)
    if summary.exists():
        print_card(summary)
    if not live:
        die_like(proc.returncode)
    return code


def die_like(returncode: int) -> None:
    """A script that died of a signal: the launcher dies of the same one, last of all, so a
    shell loop stops on Ctrl-C and `waitpid` callers see what they would see without TraceML."""
    if returncode >= 0:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    sig = -returncode
    try:
        if sig != signal.SIGKILL:  # its handler cannot be set, and needs no reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        return  # not a signal we may take: the shell-style code is returned instead


KILLED_EXIT = 128 + signal.SIGKILL
"""A script killed by SIGKILL (the out-of-memory killer, most often): 137."""


def write_killed_summary(path: Path, run_id: str, args: argparse.Namespace, started: float) -> None:
    """What the launcher knows of a script that could not write its summary: how it ended,
    and what its rank file last said (steps, median step, verdict)."""
    from traceml.analysis.killed import killed_summary
    from traceml.analysis.summary import write_summary
    from traceml.transport.runfiles.rundir import RunDir, resolve_runtime_dir
    from traceml.transport.runfiles.runfile import read_rank_file

    try:
        rank = read_rank_file(RunDir(resolve_runtime_dir(None), run_id).rank_json(0))
    except (TraceMLError, OSError):
        rank = None
    summary = killed_summary(
        run_id=run_id,
        script=Path(args.script).name,
        argv=list(args.args),
        started=rank.info.started if rank and rank.info.started else started,
        duration_s=time.time() - started,
        device=rank.info.device if rank else "cpu",
        steps=None if rank is None or rank.last_step is None else rank.last_step + 1,
        median_ms=rank.median_step_ms if rank else None,
        last_primary=rank.primary if rank else None,
    )
    try:
        write_summary(summary, path)
    except TraceMLError as err:
        print(f"traceml: no summary written ({err.msg})", file=sys.stderr)
