"""`traceml show SUMMARY|RUN [--json]`: print a final_summary.json as a card, or as checked JSON.

SUMMARY is a file or the folder holding one; anything that is not a path is taken as a run id
(or unique prefix, as `traceml attach` takes), whose summary the run files name.

Reads one file and prints; bad input raises SchemaError, which main turns into one line and exit
code 2. Never imports torch or textual.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from traceml.analysis.summary import load_summary
from traceml.errors import ConfigError

SUMMARY_NAME = "final_summary.json"
MAX_WIDTH = 100
"""The card never gets wider than this, however wide the terminal."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "show",
        help="print a run's final_summary.json as a readable card",
        description="Print a final_summary.json as a card, diagnosis first.",
    )
    parser.add_argument(
        "summary",
        metavar="SUMMARY",
        type=Path,
        help=f"path to a {SUMMARY_NAME}, the folder that holds one, or a run id (see traceml ls)",
    )
    parser.add_argument("--json", action="store_true", help="print the checked JSON instead")
    parser.add_argument("--width", type=int, default=None, help="card width (default: terminal)")


def resolve(path: Path) -> Path:
    """A folder means the final_summary.json inside it; a path that does not exist, a run id.

    Raises:
        RunNotFoundError: neither a file nor a known run.
        ConfigError: the run has no summary (yet).
    """
    if path.is_dir():
        return path / SUMMARY_NAME
    if path.exists() or len(path.parts) != 1:
        return path
    return run_summary(str(path))


def run_summary(ref: str) -> Path:
    """The summary file of run `ref` (an id or unique prefix).

    Raises:
        RunNotFoundError: no such file and no such run.
        ConfigError: the run wrote no summary (yet).
    """
    from traceml.errors import RunNotFoundError
    from traceml.transport.subscribe.runs import resolve_run

    try:
        entry = resolve_run(ref)
    except RunNotFoundError as err:
        raise RunNotFoundError(f"{ref} is neither a summary file nor a run: {err.msg}") from err
    summary = entry.summary_path
    if summary is not None and summary.is_file():
        return summary
    if entry.live:
        raise ConfigError(
            f"run {entry.run_id} is still {entry.state}: `traceml attach"
            f" {entry.run_id}` shows it live; its summary comes at the end"
        )
    raise ConfigError(f"run {entry.run_id} ({entry.state}) left no summary")


def run(args: argparse.Namespace) -> int:
    from traceml.analysis.render import render_card

    summary = load_summary(resolve(args.summary))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    width = args.width or min(MAX_WIDTH, shutil.get_terminal_size((80, 24)).columns)
    print(render_card(summary, width=width), end="")
    return 0
