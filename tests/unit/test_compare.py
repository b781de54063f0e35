"""compare(): verdicts, reasons, memory, ranks and notes, on summaries from the real builder."""

from __future__ import annotations

import json
from typing import Any

import pytest

from traceml.analysis.compare import (
    Change,
    CompareError,
    compare,
    decide,
    direction,
    regressed,
    signed_ms,
    signed_pct,
)
from traceml.analysis.compare_render import (
    COMPARE_SCHEMA,
    comparison_to_json,
    render_comparison,
    render_table,
    report_to_json,
)
from traceml.analysis.schema import validate_summary
from traceml.analysis.store import RunStore
from traceml.analysis.summary import build_summary
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.records import PHASES, Clock, ExitKind, RankEnd, RankInfo, StepRecord

Phases = tuple[float | None, ...]
INPUT: Phases = (40.0, 2.0, 25.0, 25.0, 5.0, None, 3.0)
"""100 ms steps, 40 % waiting on data: INPUT_BOUND."""
COMPUTE: Phases = (2.0, 2.0, 28.0, 30.0, 5.0, None, 3.0)
"""70 ms steps, forward + backward 83 %: COMPUTE_BOUND."""
SHIFTED: Phases = (30.0, 2.0, 30.0, 30.0, 5.0, None, 3.0)
"""Still 100 ms, but 10 ms moved from data loading into compute."""


def summary(
    phases: Phases = INPUT,
    *,
    steps: int = 100,
    ranks: int = 1,
    rss: float = 800.0,
    device_mb: float | None = None,
    slow_rank: int | None = None,
    run_id: str = "run",
    script: str = "train.py",
    exit: ExitKind = "ok",  # noqa: A002 (the summary's own field name)
) -> dict[str, Any]:
    """A real summary: RunStore + build_summary over hand-made steps (CPU unless device_mb)."""
    store = RunStore()
    device = "cpu" if device_mb is None else "cuda:0"
    for r in range(ranks):
        capacity = None if device_mb is None else 80_000.0
        store.add_info(
            RankInfo(
                run_id,
                r,
                world_size=ranks,
                host="h",
                device=device,
                script=script,
                device_capacity_mb=capacity,
            )
        )
        ph = phases
        if r == slow_rank:
            ph = (phases[0] or 0.0) + 30.0, *phases[1:]
        step_ms = sum(p for p in ph if p is not None)
        clock: Clock = "host" if device_mb is None else "cuda"
        dev = (None, None, None) if device_mb is None else (device_mb, device_mb * 1.2, device_mb)
        store.add_steps(
            [StepRecord(r, s, 0.0, step_ms, ph, clock, rss, *dev) for s in range(steps)]
        )
        store.add_end(RankEnd(r, "ok", steps, 10.0))
    built = build_summary(
        store,
        run_id=run_id,
        script=script,
        argv=[],
        started=1_700_000_000.0,
        duration_s=10.0,
        exit=exit,
        device=device,
        torch_version="2.13.0",
    )
    validate_summary(built)
    return built


def test_input_bound_to_compute_bound_is_an_improvement() -> None:
    c = compare(summary(INPUT), summary(COMPUTE), labels=("input.json", "compute.json"))
    assert c.verdict == "IMPROVEMENT"
    assert c.reason == "step -30 %: dataloader -38.0 ms"
    assert (c.step_median_ms.baseline, c.step_median_ms.candidate) == (100.0, 70.0)
    assert c.throughput.ratio == pytest.approx(100 / 70 - 1)
    assert (c.baseline.primary, c.candidate.primary) == ("INPUT_BOUND", "COMPUTE_BOUND")
    assert c.baseline.label == "input.json"
    data = {p.phase: p for p in c.phases}["dataloader"]
    assert data.ms.delta == pytest.approx(-38.0, abs=0.1)
    assert data.share_pct.delta == -37.1
    assert c.notes == ()


def test_phase_ms_are_mean_ms_that_add_up_to_the_mean_step() -> None:
    base = summary(INPUT)
    base["step_time"]["mean_ms"] = 130.0  # a few slow outliers pull the mean, not the median
    c = compare(base, summary(COMPUTE))
    assert c.step_mean_ms.baseline == 130.0
    baseline = sum(p.ms.baseline for p in c.phases if p.ms.baseline is not None)
    assert baseline == pytest.approx(130.0, abs=0.1)
    total = sum(p.ms.delta for p in c.phases if p.ms.delta is not None)
    assert c.step_mean_ms.delta is not None
    assert total == pytest.approx(c.step_mean_ms.delta, abs=0.1)
    assert c.reason.startswith("step -30 %: dataloader")


def test_compute_bound_to_input_bound_is_a_regression_naming_the_phase() -> None:
    c = compare(summary(COMPUTE), summary(INPUT))
    assert c.verdict == "REGRESSION"
    assert c.reason == "step +43 %: dataloader +38.0 ms"
    assert regressed(c, 5.0)
    assert not regressed(c, 50.0)


def test_the_same_run_twice_is_equivalent() -> None:
    s = summary(INPUT)
    c = compare(s, s)
    assert c.verdict == "EQUIVALENT"
    assert c.reason == "step +0.0 % (within 3 %); no phase or memory moved by 8 % or more"
    assert all(p.ms.delta in (0.0, None) for p in c.phases)
    assert c.memory.peak_mb.delta == 0.0
    assert not regressed(c, 0.0)


def test_cpu_only_runs_compare_memory_by_host_rss() -> None:
    c = compare(summary(rss=800.0), summary(rss=1000.0))
    assert c.memory.basis == "host"
    assert c.memory.device_allocated_mb == Change(None, None)
    assert c.memory.peak_mb.ratio == pytest.approx(0.25)
    assert c.verdict == "REGRESSION"
    assert c.reason == "memory +25 % (host RSS peak 1000 MB), step +0.0 % (within 3 %)"
    assert not regressed(c, 0.0)  # the gate is about step time only
    assert compare(summary(rss=800.0), summary(rss=820.0)).verdict == "EQUIVALENT"


def test_device_memory_is_preferred_and_a_trade_off_is_mixed() -> None:
    base = summary(INPUT, device_mb=10_000.0, rss=900.0)
    cand = summary(COMPUTE, device_mb=12_000.0, rss=500.0)
    c = compare(base, cand)
    assert c.memory.basis == "device"
    assert (c.memory.peak_mb.baseline, c.memory.peak_mb.candidate) == (10_000.0, 12_000.0)
    assert c.verdict == "MIXED"
    assert c.reason == (
        "step -30 % (dataloader -38.0 ms) but memory +20 % (device peak allocated 11.7 GB)"
    )


def test_gpu_against_cpu_falls_back_to_host_rss_with_a_note() -> None:
    c = compare(summary(device_mb=10_000.0, rss=900.0), summary(rss=900.0))
    assert c.memory.basis == "host"
    assert "device memory was measured only in the baseline" in " ".join(c.notes)
    assert "devices differ: cuda:0 -> cpu" in c.notes


def test_time_moving_between_phases_with_a_flat_step_is_mixed() -> None:
    c = compare(summary(INPUT), summary(SHIFTED))
    assert c.verdict == "MIXED"
    assert c.reason == (
        "step +0.0 % (within 3 %) but time moved between phases: dataloader -10.0 ms"
    )


def test_memory_with_a_flat_step_still_names_the_shifted_phases() -> None:
    c = compare(summary(INPUT, rss=800.0), summary(SHIFTED, rss=400.0))
    assert c.verdict == "IMPROVEMENT"
    assert c.reason.endswith("; time moved between phases: dataloader -10.0 ms")


@pytest.mark.parametrize(
    ("step", "memory", "phases", "verdict"),
    [
        (1, 0, False, "REGRESSION"),
        (1, 1, True, "REGRESSION"),
        (-1, 0, True, "IMPROVEMENT"),
        (-1, -1, False, "IMPROVEMENT"),
        (1, -1, False, "MIXED"),
        (-1, 1, False, "MIXED"),
        (0, 1, True, "REGRESSION"),
        (0, -1, False, "IMPROVEMENT"),
        (0, 0, True, "MIXED"),
        (0, 0, False, "EQUIVALENT"),
    ],
)
def test_verdict_rules(step: int, memory: int, phases: bool, verdict: str) -> None:
    assert decide(step, memory, phases) == verdict


@pytest.mark.parametrize(
    ("ratio", "threshold", "expected"),
    [
        (None, 0.03, 0),
        (0.0299, 0.03, 0),
        (0.03, 0.03, 1),
        (-0.03, 0.03, -1),
        (0.079, 0.08, 0),
        (-0.5, 0.08, -1),
    ],
)
def test_direction_thresholds_are_inclusive(
    ratio: float | None, threshold: float, expected: int
) -> None:
    assert direction(ratio, threshold) == expected


@pytest.mark.parametrize(
    ("base_ms", "cand_ms", "verdict"),
    [(100.0, 102.9, "EQUIVALENT"), (100.0, 103.0, "REGRESSION"), (100.0, 97.0, "IMPROVEMENT")],
)
def test_moderate_step_threshold_from_config(base_ms: float, cand_ms: float, verdict: str) -> None:
    scale = cand_ms / base_ms
    cand = tuple(None if p is None else p * scale for p in INPUT)
    assert compare(summary(INPUT), summary(cand)).verdict == verdict


def test_thresholds_are_the_callers() -> None:
    loose = Thresholds(compare_moderate=0.5, compare_material=0.6)
    c = compare(summary(COMPUTE), summary(INPUT), loose)
    assert c.verdict == "EQUIVALENT"
    assert c.reason.startswith("step +43 % (within 50 %)")
    assert c.thresholds is loose
    assert DEFAULT_THRESHOLDS.compare_moderate == 0.03


def test_different_world_sizes_still_compare_with_a_note() -> None:
    c = compare(summary(ranks=1), summary(ranks=2))
    assert c.verdict == "EQUIVALENT"
    assert c.notes[0].startswith("world size differs: 1 -> 2 ranks")
    assert [r.rank for r in c.ranks] == [0, 1]
    assert c.ranks[1].median_ms == Change(None, 100.0)


def test_a_new_straggler_shows_in_the_rank_changes() -> None:
    c = compare(summary(COMPUTE, ranks=4), summary(COMPUTE, ranks=4, slow_rank=3))
    slow = c.ranks[3]
    assert slow.median_ms.ratio == pytest.approx(30 / 70)
    assert slow.lag_pct.baseline == 0.0
    assert (slow.lag_pct.candidate or 0.0) > 20
    assert c.ranks[0].median_ms.ratio == 0.0
    assert c.candidate.primary == "INPUT_STRAGGLER"
    assert c.notes == ("rank 3 moved apart: its median step +43 % vs +0.0 % for the run",)
    assert "Ranks  (median step" in render_comparison(c)


def test_notes_for_few_steps_and_a_failed_run() -> None:
    c = compare(summary(steps=100), summary(steps=8, exit="error", script="other.py"))
    assert "scripts differ: train.py -> other.py" in c.notes
    assert "the candidate has only 8 steps: its times are noisy" in c.notes
    assert "the candidate ended with exit 'error'" in c.notes


def test_a_run_without_steps_cannot_be_compared() -> None:
    empty = build_summary(
        RunStore(),
        run_id="e",
        script="t.py",
        argv=[],
        started=0.0,
        duration_s=1.0,
        exit="error",
        device="cpu",
        torch_version=None,
    )
    with pytest.raises(CompareError, match=r"^new\.json has no measured step time \(NO_STEPS\)"):
        compare(summary(), empty, labels=("old.json", "new.json"))


def test_unmeasured_phase_stays_null() -> None:
    c = compare(summary(), summary(COMPUTE))
    h2d = {p.phase: p for p in c.phases}["h2d"]
    assert (h2d.ms, h2d.step_fraction) == (Change(None, None), None)
    assert comparison_to_json(c)["phases"]["h2d"]["ms"]["delta"] is None
    assert "  h2d         not measured" in render_comparison(c)


@pytest.mark.parametrize(
    ("value", "text"), [(0.18, "+18 %"), (-0.045, "-4.5 %"), (0.0, "+0.0 %"), (None, "n/a")]
)
def test_signed_pct(value: float | None, text: str) -> None:
    assert signed_pct(value) == text


@pytest.mark.parametrize(
    ("value", "text"), [(12.04, "+12.0 ms"), (-150.0, "-150 ms"), (0.0, "0 ms"), (None, "n/a")]
)
def test_signed_ms(value: float | None, text: str) -> None:
    assert signed_ms(value) == text


CHANGE = {
    "type": "object",
    "required": ["baseline", "candidate", "delta", "change_pct"],
    "additionalProperties": False,
    "properties": {k: {"type": ["number", "null"]} for k in ("baseline", "candidate", "delta")}
    | {"change_pct": {"type": ["number", "null"]}},
}
RUN = {
    "type": "object",
    "required": ["label", "run_id", "script", "device", "world_size", "steps", "exit", "primary",
                 "severity", "step_diagnosis", "memory_diagnosis"],
    "additionalProperties": False,
    "properties": {
        "world_size": {"type": "integer", "minimum": 1},
        "steps": {"type": "integer", "minimum": 0},
    }
    | {k: {"type": "string"} for k in ("label", "run_id", "script", "device", "exit", "primary",
                                       "severity", "step_diagnosis", "memory_diagnosis")},
}  # fmt: skip
COMPARISON = {
    "type": "object",
    "required": ["verdict", "reason", "baseline", "candidate", "step_time", "phases", "memory",
                 "ranks", "notes"],
    "additionalProperties": False,
    "properties": {
        "verdict": {"enum": ["REGRESSION", "IMPROVEMENT", "EQUIVALENT", "MIXED"]},
        "reason": {"type": "string", "minLength": 1},
        "baseline": RUN,
        "candidate": RUN,
        "step_time": {
            "type": "object",
            "required": ["median_ms", "p95_ms", "throughput_steps_per_s"],
            "additionalProperties": CHANGE,
        },
        "phases": {
            "type": "object",
            "required": list(PHASES),
            "additionalProperties": {
                "type": "object",
                "required": ["ms", "share_pct", "step_fraction_pct"],
                "properties": {"ms": CHANGE, "share_pct": CHANGE,
                               "step_fraction_pct": {"type": ["number", "null"]}},
            },
        },
        "memory": {
            "type": "object",
            "required": ["basis", "peak_mb", "device_peak_allocated_mb",
                         "device_peak_reserved_mb", "host_rss_peak_mb", "diagnosis"],
            "properties": {"basis": {"enum": ["device", "host", None]}, "peak_mb": CHANGE},
        },
        "ranks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rank", "median_ms", "dataloader_pct", "lag_pct"],
                "properties": {"rank": {"type": "integer"}, "median_ms": CHANGE},
            },
        },
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}  # fmt: skip
REPORT = {
    "type": "object",
    "required": ["schema", "thresholds", "gate", "comparisons"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": COMPARE_SCHEMA},
        "thresholds": {
            "type": "object",
            "required": ["moderate_pct", "material_pct"],
            "additionalProperties": {"type": "number"},
        },
        "gate": {
            "type": "object",
            "required": ["fail_on_regression_pct", "failed", "failing"],
            "properties": {
                "fail_on_regression_pct": {"type": ["number", "null"]},
                "failed": {"type": "boolean"},
                "failing": {"type": "array", "items": {"type": "string"}},
            },
        },
        "comparisons": {"type": "array", "minItems": 1, "items": COMPARISON},
    },
}
"""The documented shape of `traceml compare --json`, as a JSON Schema."""


def check_report(report: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(REPORT).validate(
        json.loads(json.dumps(report, allow_nan=False))
    )


def test_report_json_matches_its_schema_and_the_gate() -> None:
    slower = compare(summary(COMPUTE), summary(INPUT), labels=("a", "slower"))
    same = compare(summary(COMPUTE), summary(COMPUTE), labels=("a", "same"))
    report = report_to_json([slower, same], 5.0)
    check_report(report)
    assert report["thresholds"] == {"moderate_pct": 3.0, "material_pct": 8.0}
    assert report["gate"] == {"fail_on_regression_pct": 5.0, "failed": True, "failing": ["slower"]}
    first = report["comparisons"][0]
    assert first["step_time"]["median_ms"] == {
        "baseline": 70.0,
        "candidate": 100.0,
        "delta": 30.0,
        "change_pct": 42.86,
    }
    assert first["phases"]["dataloader"]["share_pct"]["delta"] == 37.1
    assert first["memory"]["basis"] == "host"


def test_report_json_without_gate_and_with_gpu_multi_rank() -> None:
    c = compare(summary(ranks=2, device_mb=5000.0), summary(ranks=3, device_mb=5000.0))
    report = report_to_json([c])
    check_report(report)
    assert report["gate"] == {"fail_on_regression_pct": None, "failed": False, "failing": []}
    assert report["comparisons"][0]["memory"]["basis"] == "device"
    assert len(report["comparisons"][0]["ranks"]) == 3


def test_render_comparison_reads_verdict_first() -> None:
    c = compare(summary(INPUT), summary(COMPUTE), labels=("input.json", "compute.json"))
    lines = render_comparison(c).splitlines()
    assert lines[0] == "TraceML compare"
    assert lines[1].startswith("  baseline   input.json · train.py · run run · 1 rank · cpu")
    assert lines[3] == "IMPROVEMENT  step -30 %: dataloader -38.0 ms"
    assert "Diagnosis  INPUT_BOUND (critical) -> COMPUTE_BOUND (info)" in lines
    assert any(line.split()[:2] == ["step", "median"] and "-30 %" in line for line in lines)
    assert any(line.startswith("  dataloader") and "-37.1 pp" in line for line in lines)
    assert any(line.startswith("  host RSS peak") and line.endswith("*") for line in lines)
    assert "Ranks" not in "\n".join(lines)


def test_render_table_has_one_row_per_run() -> None:
    base = summary(COMPUTE)
    runs = {"slow.json": INPUT, "same.json": COMPUTE}
    cs = [compare(base, summary(p), labels=("base.json", name)) for name, p in runs.items()]
    lines = render_table(cs).splitlines()
    assert lines[0] == "Baseline  base.json · train.py · run run · median 70.0 ms"
    assert len(lines) == 2 + len(runs)
    assert lines[1].split()[:3] == ["run", "script", "median"]
    assert lines[2].split()[:6] == ["slow.json", "train.py", "100", "ms", "+43", "%"]
    assert "REGRESSION  step +43 %: dataloader +38.0 ms" in lines[2]
    assert "EQUIVALENT" in lines[3]
