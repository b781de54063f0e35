"""The CLI's entry: one subcommand's module alone on its path, every subcommand in the help."""

from __future__ import annotations

import subprocess
import sys

import pytest

from traceml.cli.main import COMMANDS, build_parser, main

IMPORTED_BY_RUN = """
import sys
from traceml.cli.main import build_parser
build_parser("run").parse_args(["run", "--no-live", "x.py"])
print(" ".join(sorted(m for m in sys.modules if m.startswith("traceml.cli."))))
"""


def test_a_subcommand_imports_only_its_own_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", IMPORTED_BY_RUN], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["traceml.cli.main", "traceml.cli.run"]


def test_the_top_level_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for name in COMMANDS:
        assert name in text


def test_an_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["frobnicate"])
    assert exit_.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    assert build_parser("ls").parse_args(["ls"]).command == "ls"
