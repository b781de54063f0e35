"""`python -m traceml show` as a real subprocess: the card, --json, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.summaries import valid_summary
from traceml.analysis.schema import validate_summary
from traceml.analysis.store import RunStore
from traceml.analysis.summary import write_summary
from traceml.records import RankInfo, StepRecord


def traceml(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceml", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def make_summary(ranks: int = 1) -> dict[str, Any]:
    store = RunStore()
    phases = (40.0, 2.0, 25.0, 25.0, 5.0, None, 3.0)
    for r in range(ranks):
        store.add_info(RankInfo("cli-run", r, world_size=ranks, host="h", script="train.py"))
        store.add_steps(
            [StepRecord(r, s, 0.0, 100.0, phases, host_rss_mb=300.0) for s in range(60)]
        )
    return valid_summary(store, run_id="cli-run", argv=["--epochs", "1"])


@pytest.fixture
def summary_path(tmp_path: Path) -> Path:
    return write_summary(make_summary(), tmp_path / "run" / "final_summary.json")


def test_show_prints_the_card(summary_path: Path) -> None:
    result = traceml("show", summary_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "TraceML  train.py  run cli-run"
    assert "CRITICAL  INPUT_BOUND" in lines
    assert "  dataloader 40 % of step time (40.0 ms of a 100 ms mean step)" in lines


def test_show_accepts_the_run_folder(summary_path: Path) -> None:
    result = traceml("show", summary_path.parent, "--width", "60")
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 60


def test_show_json_round_trips(summary_path: Path) -> None:
    result = traceml("show", summary_path, "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    validate_summary(shown)
    assert shown == json.loads(summary_path.read_text())


def test_show_multi_rank(tmp_path: Path) -> None:
    path = write_summary(make_summary(ranks=3), tmp_path / "s.json")
    result = traceml("show", path)
    assert result.returncode == 0, result.stderr
    assert "Ranks  (lag vs the median rank, % of a step)" in result.stdout


def bad_version() -> str:
    return json.dumps({**make_summary(), "schema": "traceml.summary/7"})


def bad_type() -> str:
    summary = make_summary()
    summary["step_time"]["steps"] = "many"
    return json.dumps(summary)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no summary at"),
        ("not json at all", "is not JSON"),
        ('{"a": 1}', "is not a TraceML summary"),
        (bad_version(), "is a traceml.summary/7 summary; this TraceML"),
        (bad_type(), "at step_time.steps: 'many' is not of type 'integer'"),
    ],
    ids=["missing", "not-json", "not-summary", "other-version", "wrong-type"],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "final_summary.json"
    if content is not None:
        path.write_text(content)
    result = traceml("show", path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("traceml: error: ")
    assert message in result.stderr


def test_analysis_and_show_never_import_torch_or_textual() -> None:
    code = (
        "import sys, traceml.cli.show, traceml.analysis.store, traceml.analysis.summary,"
        " traceml.analysis.render, traceml.analysis.diagnose, traceml.analysis.schema;"
        " bad = [m for m in ('torch', 'textual') if m in sys.modules];"
        " print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
