"""`traceml attach` as the CLI runs it: an unknown run or no terminal is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tui.fixtures import CannedRun
from tests.tui.test_tui_live import start_ranks
from traceml.cli.main import main


def test_an_unknown_run_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attach", "no-such-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["traceml: error: no run matches 'no-such-run': see `traceml ls --all`"]


def test_no_live_run_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attach"]) == 2
    assert capsys.readouterr().err.startswith("traceml: error: no live run")


def test_without_a_terminal_attach_says_so(runtime_dir: Path) -> None:
    ranks = start_ranks(CannedRun(ranks=1, slow_rank=None), runtime_dir)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "traceml", "attach"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
    finally:
        ranks[0].finish()
        ranks[0].join(5)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "traceml attach needs a terminal" in lines[0]
    assert "train-20231114-221320-a1b2" in lines[0]


def test_attach_never_loads_textual_before_it_is_needed() -> None:
    code = (
        "import sys\nfrom traceml.cli.main import build_parser\nbuild_parser()\n"
        "print('textual' in sys.modules, 'traceml_tui' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_viewer_never_loads_torch_or_the_instrumentation() -> None:
    code = (
        "import sys\nimport traceml_tui.app, traceml_tui.launch, traceml_tui.source\n"
        "print(sorted(m for m in sys.modules"
        " if m == 'torch' or m.startswith('traceml.instrument')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
