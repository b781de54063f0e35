"""`traceml show SUMMARY [--json]`: print a final_summary.json as a card, or as checked JSON.

Reads one file and prints; bad input raises SchemaError, which main turns into one line and exit
code 2. Never imports torch or textual.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from traceml.analysis.summary import load_summary

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
        help=f"path to a {SUMMARY_NAME}, or the folder that holds one",
    )
    parser.add_argument("--json", action="store_true", help="print the checked JSON instead")
    parser.add_argument("--width", type=int, default=None, help="card width (default: terminal)")


def resolve(path: Path) -> Path:
    """A folder means the final_summary.json inside it."""
    return path / SUMMARY_NAME if path.is_dir() else path


def run(args: argparse.Namespace) -> int:
    from traceml.analysis.render import render_card

    summary = load_summary(resolve(args.summary))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    width = args.width or min(MAX_WIDTH, shutil.get_terminal_size((80, 24)).columns)
    print(render_card(summary, width=width), end="")
    return 0
