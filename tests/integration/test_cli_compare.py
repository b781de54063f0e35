"""`python -m traceml compare` as a real subprocess: report, --json, the CI gate, many runs, and
one-line errors (exit 2) for every kind of bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.summaries import valid_summary
from traceml.analysis.store import RunStore
from traceml.analysis.summary import build_summary, load_summary, write_summary
from traceml.records import RankInfo, StepRecord

INPUT = (40.0, 2.0, 25.0, 25.0, 5.0, None, 3.0)
"""100 ms steps, 40 % data loading."""
COMPUTE = (2.0, 2.0, 28.0, 30.0, 5.0, None, 3.0)
"""70 ms steps, compute bound."""
SLIGHTLY_SLOWER = (2.0, 2.0, 30.0, 31.0, 5.0, None, 3.0)
"""73 ms: +4.3 % on COMPUTE."""
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def traceml(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceml", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def make_summary(
    phases: tuple[float | None, ...], *, ranks: int = 1, rss: float = 500.0, steps: int = 60
) -> dict[str, Any]:
    store = RunStore()
    for r in range(ranks):
        store.add_info(RankInfo("cli", r, world_size=ranks, host="h", script="train.py"))
        step_ms = sum(p for p in phases if p is not None)
        store.add_steps(
            [StepRecord(r, s, 0.0, step_ms, phases, host_rss_mb=rss) for s in range(steps)]
        )
    return valid_summary(store, run_id=f"run-{ranks}")


def put(tmp_path: Path, name: str, phases: tuple[float | None, ...], **kw: Any) -> Path:
    return write_summary(make_summary(phases, **kw), tmp_path / name / "final_summary.json")


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    return {
        "input": put(tmp_path, "input", INPUT),
        "compute": put(tmp_path, "compute", COMPUTE),
        "slower": put(tmp_path, "slower", SLIGHTLY_SLOWER),
    }


def ok(result: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert result.returncode == code, result.stderr
    assert result.stderr == ""
    return result.stdout


def test_report_says_where_the_time_moved(runs: dict[str, Path]) -> None:
    lines = ok(traceml("compare", runs["input"], runs["compute"])).splitlines()
    assert lines[0] == "TraceML compare"
    assert lines[3] == "IMPROVEMENT  step -30 %: dataloader -38.0 ms"
    assert "Diagnosis  INPUT_BOUND (critical) -> COMPUTE_BOUND (info)" in lines
    assert any(line.startswith("  throughput") and "+43 %" in line for line in lines)
    assert any(line.startswith("  host RSS peak") for line in lines)


def test_folders_mean_their_final_summary(runs: dict[str, Path]) -> None:
    out = ok(traceml("compare", runs["compute"].parent, runs["input"].parent))
    assert "REGRESSION  step +43 %: dataloader +38.0 ms" in out


def json_of(result: subprocess.CompletedProcess[str], code: int = 0) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(ok(result, code))
    assert report["schema"] == "traceml.compare/1"
    return report


def test_json_is_the_documented_object(runs: dict[str, Path]) -> None:
    report = json_of(traceml("compare", runs["compute"], runs["input"], "--json"))
    assert report["gate"] == {"fail_on_regression_pct": None, "failed": False, "failing": []}
    (c,) = report["comparisons"]
    assert (c["verdict"], c["reason"]) == ("REGRESSION", "step +43 %: dataloader +38.0 ms")
    assert c["baseline"]["label"] == str(runs["compute"])
    assert c["step_time"]["median_ms"]["change_pct"] == 42.86
    assert c["memory"]["basis"] == "host"
    assert c["phases"]["h2d"]["ms"] == dict.fromkeys(
        ("baseline", "candidate", "delta", "change_pct")
    )


@pytest.mark.parametrize(
    ("limit", "code", "last_line"),
    [
        ("5", 1, "gate FAILED: 1 of 1 run(s) slowed by more than 5 %: "),
        ("4", 1, "gate FAILED"),
        ("4.5", 0, "gate passed: no run slowed by more than 4.5 % (worst +4.3 %)"),
        ("0", 1, "gate FAILED"),
    ],
)
def test_fail_on_regression_exit_codes(
    runs: dict[str, Path], limit: str, code: int, last_line: str
) -> None:
    target = runs["input"] if limit == "5" else runs["slower"]
    out = ok(traceml("compare", runs["compute"], target, "--fail-on-regression", limit), code)
    assert out.splitlines()[-1].startswith(last_line)


def test_an_improvement_passes_the_gate(runs: dict[str, Path]) -> None:
    out = ok(traceml("compare", runs["input"], runs["compute"], "--fail-on-regression", "0"))
    assert out.splitlines()[-1] == "gate passed: no run slowed by more than 0 % (worst -30 %)"


def test_gate_in_json(runs: dict[str, Path]) -> None:
    args = ("compare", runs["compute"], runs["input"], "--json", "--fail-on-regression", "5")
    report = json_of(traceml(*args), 1)
    assert report["gate"] == {
        "fail_on_regression_pct": 5.0,
        "failed": True,
        "failing": [str(runs["input"])],
    }


def test_many_runs_one_row_each_and_any_regression_fails(
    tmp_path: Path, runs: dict[str, Path]
) -> None:
    found = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("*/final_summary.json"))
    assert found[0] == "compute/final_summary.json"  # the baseline itself is left out
    args = ("compare", "compute/final_summary.json", *found, "--fail-on-regression", "5")
    result = traceml(*args, cwd=tmp_path)
    lines = ok(result, 1).splitlines()
    assert (
        lines[0] == "Baseline  compute/final_summary.json · train.py · run run-1 · median 70.0 ms"
    )
    rows = lines[2:-1]
    assert [row.split()[0] for row in rows] == [
        "input/final_summary.json",
        "slower/final_summary.json",
    ]
    assert "REGRESSION  step +43 %" in rows[0]
    assert "REGRESSION  step +4.3 %" in rows[1]
    assert (
        lines[-1] == "gate FAILED: 1 of 2 run(s) slowed by more than 5 %: input/final_summary.json"
    )


def test_a_folder_of_runs_expands_below_it(tmp_path: Path, runs: dict[str, Path]) -> None:
    base = tmp_path / "baseline.json"
    shutil.copy(runs["compute"], base)
    report = json_of(traceml("compare", base, tmp_path, "--json", "--fail-on-regression", "50"))
    labels = [c["candidate"]["label"] for c in report["comparisons"]]
    assert labels == [str(runs[name]) for name in ("compute", "input", "slower")]
    assert [c["verdict"] for c in report["comparisons"]] == [
        "EQUIVALENT",
        "REGRESSION",
        "REGRESSION",
    ]
    assert report["gate"]["failed"] is False


def test_cpu_only_runs_compare_by_host_rss(tmp_path: Path) -> None:
    a = put(tmp_path, "a", COMPUTE, rss=400.0)
    b = put(tmp_path, "b", COMPUTE, rss=600.0)
    assert load_summary(a)["step_memory"]["device_peak_allocated_mb"] is None
    (c,) = json_of(traceml("compare", a, b, "--json"))["comparisons"]
    assert c["memory"]["basis"] == "host"
    assert c["memory"]["peak_mb"]["change_pct"] == 50.0
    assert c["reason"] == "memory +50 % (host RSS peak 600 MB), step +0.0 % (within 3 %)"


def test_different_world_sizes_compare_with_a_note(tmp_path: Path) -> None:
    one = put(tmp_path, "one", COMPUTE)
    four = put(tmp_path, "four", COMPUTE, ranks=4)
    out = ok(traceml("compare", one, four))
    assert "EQUIVALENT" in out.splitlines()[3]
    assert "  · world size differs: 1 -> 4 ranks" in out
    assert "Ranks  (median step" in out


def other_version() -> str:
    return json.dumps({**make_summary(COMPUTE), "schema": "traceml.summary/2"})


def no_steps() -> str:
    empty = build_summary(
        RunStore(), run_id="e", script="t.py", argv=[], started=0.0, duration_s=1.0,
        exit="error", device="cpu", torch_version=None,
    )  # fmt: skip
    return json.dumps(empty)


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (None, (), "no summary at "),
        ("{oops", (), "is not JSON (line 1, column 2)"),
        ('{"loss": 0.1}', (), "is not a TraceML summary"),
        (other_version(), (), "is a traceml.summary/2 summary; this TraceML"),
        (no_steps(), (), "has no measured step time (NO_STEPS)"),
        ("", ("--fail-on-regression", "-5"), "--fail-on-regression -5: use a percentage"),
    ],
    ids=["missing", "not-json", "not-summary", "other-version", "no-steps", "negative-gate"],
)
def test_bad_input_is_one_line_and_exit_2(
    runs: dict[str, Path], tmp_path: Path, content: str | None, extra: tuple[str, ...], message: str
) -> None:
    bad = tmp_path / "bad.json"
    if content:
        bad.write_text(content)
    target = runs["input"] if extra else bad
    for args in ((runs["compute"], target), (target, runs["compute"])):
        result = traceml("compare", *args, *extra)
        assert result.returncode == 2
        assert result.stdout == ""
        assert "Traceback" not in result.stderr
        assert result.stderr.count("\n") == 1
        assert result.stderr.startswith("traceml: error: ")
        assert message in result.stderr


def test_other_version_names_both_versions(runs: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "v2.json"
    bad.write_text(other_version())
    result = traceml("compare", runs["compute"], bad)
    assert result.returncode == 2
    assert "traceml.summary/2" in result.stderr and "reads traceml.summary/1" in result.stderr


@pytest.mark.parametrize("case", ["empty-folder", "baseline-folder-of-runs"])
def test_folder_errors(tmp_path: Path, runs: dict[str, Path], case: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    if case == "empty-folder":
        args, message = (runs["compute"], empty), f"no final_summary.json in {empty} or in its"
    else:
        args, message = (tmp_path, runs["compute"]), f"{tmp_path} holds several runs: pass one"
    result = traceml("compare", *args)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"traceml: error: {message}")
    assert result.stderr.count("\n") == 1


def test_compare_never_imports_torch_or_textual() -> None:
    code = (
        "import sys, traceml.cli.compare, traceml.analysis.compare_render;"
        " bad = [m for m in ('torch', 'textual') if m in sys.modules]; sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_two_real_examples_compare(tmp_path: Path) -> None:
    summaries = {}
    for name in ("input_bound", "compute_bound"):
        summaries[name] = tmp_path / f"{name}.json"
        run = traceml(
            "run", "--no-live", "--summary", summaries[name], EXAMPLES / f"{name}.py",
            "--steps", "40", cwd=tmp_path,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
    report = json_of(
        traceml("compare", summaries["input_bound"], summaries["compute_bound"], "--json")
    )
    (c,) = report["comparisons"]
    assert (c["baseline"]["primary"], c["candidate"]["primary"]) == ("INPUT_BOUND", "COMPUTE_BOUND")
    assert c["phases"]["dataloader"]["share_pct"]["delta"] < -10
    assert c["memory"]["basis"] == "host"
    assert c["verdict"] in ("REGRESSION", "IMPROVEMENT", "MIXED", "EQUIVALENT")
    text = ok(traceml("compare", summaries["input_bound"], summaries["compute_bound"]))
    assert text.splitlines()[3].startswith(c["verdict"])
