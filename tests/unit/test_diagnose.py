"""diagnose(): one finding per section, every finding most severe first, editable rule lists."""

from __future__ import annotations

import pytest

from traceml.analysis import diagnose as diagnose_mod
from traceml.analysis import rules_step
from traceml.analysis.diagnose import Diagnosis, by_severity, diagnose
from traceml.analysis.store import RunStore
from traceml.analysis.view import RankWindow, RunView
from traceml.config import Thresholds
from traceml.records import PHASES, Finding, StepRecord


def rank(r: int = 0, steps: int = 100, **shares: float | None) -> RankWindow:
    share = tuple(shares.get(p) for p in PHASES)
    return RankWindow(
        rank=r,
        steps=steps,
        total_steps=steps,
        median_ms=100.0,
        mean_ms=100.0,
        phase_ms=tuple(None if s is None else 100.0 * s for s in share),
        phase_share=share,
        host_rss_peak_mb=100.0,
    )


def view(*ranks: RankWindow, kind: str = "summary") -> RunView:
    return RunView(world_size=len(ranks), ranks=ranks, kind=kind)  # type: ignore[arg-type]


def kinds(diag: Diagnosis) -> list[str]:
    return [f.kind for f in diag.findings]


def test_balanced_everywhere_when_nothing_fires() -> None:
    diag = diagnose(view(rank(forward=0.3, backward=0.3, dataloader=0.05)))
    assert diag.step.kind == "BALANCED"
    assert diag.memory.kind == "BALANCED"
    assert diag.ranks == ()
    assert diag.primary is diag.step
    assert kinds(diag) == ["BALANCED", "BALANCED"]


def test_primary_is_the_most_severe() -> None:
    r = RankWindow(
        rank=0,
        steps=100,
        total_steps=100,
        mean_ms=100.0,
        phase_ms=(12.0, None, 40.0, 40.0, None, None, 8.0),
        phase_share=(0.12, None, 0.4, 0.4, None, None, 0.08),
        device_peak_reserved_mb=980.0,
        device_capacity_mb=1000.0,
    )
    diag = diagnose(view(r))
    assert diag.primary.kind == "PRESSURE"
    assert diag.primary.severity == "critical"
    assert diag.step.kind == "INPUT_BOUND"
    assert kinds(diag) == ["PRESSURE", "INPUT_BOUND"]


def test_step_wins_a_tie_and_most_severe_step_finding_is_kept() -> None:
    diag = diagnose(view(rank(dataloader=0.12, between=0.25, forward=0.3, backward=0.3)))
    assert diag.step.kind == "HOST_BOUND"
    assert diag.step.severity == "critical"
    assert kinds(diag)[:2] == ["HOST_BOUND", "INPUT_BOUND"]


def test_compute_bound_is_info_primary() -> None:
    diag = diagnose(view(rank(forward=0.45, backward=0.45, other=0.05)))
    assert diag.primary.kind == "COMPUTE_BOUND"
    assert diag.primary.severity == "info"


@pytest.mark.parametrize(
    ("v", "kind", "severity"),
    [
        (view(kind="summary"), "NO_STEPS", "warning"),
        (view(kind="live"), "NO_STEPS", "info"),
        (view(rank(steps=1, dataloader=0.9)), "WARMUP", "info"),
    ],
)
def test_early_states(v: RunView, kind: str, severity: str) -> None:
    diag = diagnose(v)
    assert (diag.primary.kind, diag.primary.severity) == (kind, severity)


def test_rank_findings_come_with_step_findings() -> None:
    ranks = [rank(r, dataloader=0.05, forward=0.45, backward=0.45) for r in range(3)]
    ranks.append(rank(3, dataloader=0.4, forward=0.45, backward=0.45))
    diag = diagnose(view(*ranks))
    assert [f.kind for f in diag.ranks] == ["INPUT_STRAGGLER"]
    assert "INPUT_STRAGGLER" in kinds(diag)


def test_a_straggler_wins_a_severity_tie_with_the_step_finding_it_causes() -> None:
    # Two ranks: the median of their data shares is input-bound only because rank 1 is slow.
    v = view(
        rank(0, dataloader=0.02, forward=0.1, backward=0.8),
        rank(1, dataloader=0.7, forward=0.1, backward=0.15),
    )
    diag = diagnose(v)
    assert diag.step.severity == diag.ranks[0].severity == "critical"
    assert diag.primary.kind == "INPUT_STRAGGLER"
    assert kinds(diag).index("INPUT_STRAGGLER") < kinds(diag).index(diag.step.kind)


def test_rule_lists_are_editable(monkeypatch: pytest.MonkeyPatch) -> None:
    v = view(rank(dataloader=0.5, forward=0.25, backward=0.25))
    assert diagnose(v).step.kind == "INPUT_BOUND"
    monkeypatch.setattr(
        diagnose_mod,
        "STEP_RULES",
        [r for r in diagnose_mod.STEP_RULES if r is not rules_step.input_bound],
    )
    assert diagnose(v).step.kind == "BALANCED"

    def always(view: RunView, th: Thresholds) -> Finding:
        return Finding("CUSTOM", "ranks", "critical", "custom summary", "custom action")

    monkeypatch.setattr(diagnose_mod, "RANK_RULES", [always])
    assert diagnose(v).primary.kind == "CUSTOM"


def test_thresholds_are_used() -> None:
    v = view(rank(dataloader=0.15, forward=0.35, backward=0.4))
    assert diagnose(v).step.severity == "warning"
    assert diagnose(v, Thresholds(input_critical=0.15)).step.severity == "critical"
    assert diagnose(v, Thresholds(input_warning=0.2, input_critical=0.3)).step.kind == "BALANCED"


def test_by_severity_is_stable() -> None:
    a = Finding("A", "step_time", "warning", "s", "a")
    b = Finding("B", "ranks", "critical", "s", "a")
    c = Finding("C", "step_memory", "warning", "s", "a")
    assert [f.kind for f in by_severity([a, b, c])] == ["B", "A", "C"]


def test_live_view_of_a_store_is_diagnosed_end_to_end() -> None:
    store = RunStore()
    phases = (30.0, 1.0, 30.0, 30.0, 5.0, None, 4.0)
    store.add_steps([StepRecord(0, s, 0.0, 100.0, phases, host_rss_mb=900.0) for s in range(50)])
    diag = diagnose(store.live_view())
    assert diag.primary.kind == "INPUT_BOUND"
    assert diag.primary.severity == "critical"
    assert diag.primary.summary == "dataloader 30 % of step time (30.0 ms of a 100 ms mean step)"
