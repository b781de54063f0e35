"""Entry point of the `traceml` command: parse, dispatch, and turn TraceMLError into exit code 2.

Each subcommand module exposes `add_parser(subparsers)` and `run(args) -> int`. Subcommand modules
are imported lazily, so `traceml ls` never pays for torch or Textual.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from traceml._version import __version__
from traceml.errors import TraceMLError

COMMANDS: dict[str, str] = {
    "run": "traceml.cli.run",
    "attach": "traceml.cli.attach",
    "ls": "traceml.cli.ls",
    "show": "traceml.cli.show",
    "compare": "traceml.cli.compare",
    "export": "traceml.cli.export",
    "prune": "traceml.cli.prune",
    "report": "traceml.cli.report",
}
"""Subcommand name -> module; a module that does not exist yet is left out of the parser."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with `only`, just that subcommand's (its module alone is imported:
    `traceml run` starts the script without first importing what `ls` or `export` need)."""
    parser = argparse.ArgumentParser(
        prog="traceml",
        description="Where each PyTorch training step's time goes, live.",
    )
    parser.add_argument("--version", action="version", version=f"traceml {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = [COMMANDS[only]] if only in COMMANDS else COMMANDS.values()
    for module_name in names:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            continue
        module.add_parser(sub)
    return parser


def error_line(err: TraceMLError) -> str:
    """The one line the user sees for an error they can act on."""
    return f"traceml: error: {err.msg}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command])
    try:
        code: int = module.run(args)
    except TraceMLError as err:
        print(error_line(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
