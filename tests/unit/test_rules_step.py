"""Step-time rules on hand-built RunViews, at and around every threshold."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from traceml.analysis import rules_step
from traceml.analysis.rules import Rule
from traceml.analysis.view import RankWindow, RunView
from traceml.config import DEFAULT_THRESHOLDS as TH
from traceml.records import PHASES


def rank(
    r: int = 0,
    shares: Mapping[str, float | None] | None = None,
    step_ms: float = 100.0,
    steps: int = 100,
) -> RankWindow:
    share = tuple((shares or {}).get(p) for p in PHASES)
    return RankWindow(
        rank=r,
        steps=steps,
        total_steps=steps,
        median_ms=step_ms,
        p95_ms=step_ms,
        mean_ms=step_ms,
        phase_ms=tuple(None if s is None else s * step_ms for s in share),
        phase_share=share,
    )


def view(*ranks: RankWindow, kind: str = "summary") -> RunView:
    return RunView(world_size=len(ranks), ranks=ranks, kind=kind)  # type: ignore[arg-type]


BASE = {"dataloader": 0.0, "between": 0.0, "forward": 0.35, "backward": 0.35, "optimizer": 0.05}

SHARE_RULES = [
    (rules_step.input_bound, "INPUT_BOUND", "dataloader", TH.input_warning, TH.input_critical),
    (rules_step.host_bound, "HOST_BOUND", "between", TH.host_warning, TH.host_critical),
    (rules_step.host_bound, "HOST_BOUND", "other", TH.host_warning, TH.host_critical),
    (rules_step.h2d_bound, "H2D_BOUND", "h2d", TH.h2d_warning, TH.h2d_critical),
    (
        rules_step.optimizer_bound,
        "OPTIMIZER_BOUND",
        "optimizer",
        TH.optimizer_warning,
        TH.optimizer_critical,
    ),
]
LEVELS = [
    ("below warning", lambda w, c: w - 0.001, None),
    ("at warning", lambda w, c: w, "warning"),
    ("between", lambda w, c: (w + c) / 2, "warning"),
    ("just below critical", lambda w, c: c - 0.001, "warning"),
    ("at critical", lambda w, c: c, "critical"),
    ("far above", lambda w, c: 0.9, "critical"),
]


@pytest.mark.parametrize(("rule", "kind", "phase", "warning", "critical"), SHARE_RULES)
@pytest.mark.parametrize(("_", "level", "expected"), LEVELS)
def test_share_rules_at_thresholds(
    rule: Rule,
    kind: str,
    phase: str,
    warning: float,
    critical: float,
    _: str,
    level: object,
    expected: str | None,
) -> None:
    share = level(warning, critical)  # type: ignore[operator]
    finding = rule(view(rank(shares={**BASE, phase: share})), TH)
    assert (finding.severity if finding else None) == expected
    if finding is not None:
        assert finding.kind == kind
        assert finding.section == "step_time"
        assert finding.evidence["share"] == pytest.approx(share, abs=1e-4)


@pytest.mark.parametrize(
    ("steps", "expected"), [(19, "warning"), (20, "critical"), (500, "critical")]
)
def test_critical_needs_enough_steps(steps: int, expected: str) -> None:
    finding = rules_step.input_bound(view(rank(shares={"dataloader": 0.5}, steps=steps)), TH)
    assert finding is not None
    assert finding.severity == expected


def test_summary_has_the_numbers_and_action_says_where_to_look() -> None:
    v = view(rank(shares={**BASE, "dataloader": 0.47}, step_ms=49.2))
    finding = rules_step.input_bound(v, TH)
    assert finding is not None
    assert finding.summary == "dataloader 47 % of step time (23.1 ms of a 49.2 ms mean step)"
    assert "num_workers" in finding.action
    assert "__getitem__" in finding.action


def test_host_bound_sums_between_and_other() -> None:
    finding = rules_step.host_bound(view(rank(shares={"between": 0.06, "other": 0.05})), TH)
    assert finding is not None
    assert finding.summary.startswith("between + other 11 % of step time")


def test_host_bound_names_only_measured_phases() -> None:
    finding = rules_step.host_bound(view(rank(shares={"between": None, "other": 0.15})), TH)
    assert finding is not None
    assert finding.summary.startswith("other 15 %")


@pytest.mark.parametrize("rule", [r for r, *_ in SHARE_RULES])
def test_unmeasured_phase_never_fires(rule: Rule) -> None:
    assert rule(view(rank(shares={"forward": 0.5, "backward": 0.5})), TH) is None


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        ([0.05, 0.15, 0.25], "warning"),
        ([0.05, 0.05, 0.25], None),
        ([None, 0.25, 0.25], "critical"),
        ([0.25, 0.25, 0.05], "critical"),
    ],
)
def test_median_over_ranks(shares: list[float | None], expected: str | None) -> None:
    v = view(*(rank(i, shares={"dataloader": s}) for i, s in enumerate(shares)))
    finding = rules_step.input_bound(v, TH)
    assert (finding.severity if finding else None) == expected
    if finding is not None:
        assert "median over" in finding.summary


@pytest.mark.parametrize(
    ("shares", "fires"),
    [
        ({"forward": 0.4, "backward": 0.4}, True),
        ({"forward": 0.4, "backward": 0.399}, False),
        ({"forward": None, "backward": 0.85}, True),
        ({"forward": 0.45, "backward": 0.45, "dataloader": 0.1}, False),
        ({"forward": 0.45, "backward": 0.45, "optimizer": 0.0, "other": 0.05}, True),
        ({"forward": None, "backward": None, "other": 0.95}, False),
    ],
)
def test_compute_bound_only_when_nothing_else_fired(
    shares: dict[str, float | None], fires: bool
) -> None:
    finding = rules_step.compute_bound(view(rank(shares=shares)), TH)
    assert (finding is not None) == fires
    if finding is not None:
        assert finding.severity == "info"
        assert finding.kind == "COMPUTE_BOUND"


@pytest.mark.parametrize(("steps", "fires"), [(0, False), (1, True), (2, False)])
def test_warmup_below_min_steps(steps: int, fires: bool) -> None:
    v = view(rank(shares={"dataloader": 0.9}, steps=steps))
    finding = rules_step.warmup(v, TH)
    assert (finding is not None) == fires
    if fires:
        assert finding is not None and finding.severity == "info"
        assert rules_step.input_bound(v, TH) is None


@pytest.mark.parametrize(
    ("v", "expected"),
    [
        (view(kind="summary"), "warning"),
        (view(rank(steps=0), kind="summary"), "warning"),
        (view(kind="live"), "info"),
        (view(rank(steps=1), kind="summary"), None),
    ],
)
def test_no_steps(v: RunView, expected: str | None) -> None:
    finding = rules_step.no_steps(v, TH)
    assert (finding.severity if finding else None) == expected
    if finding is not None:
        assert "with traceml.trace_step(model):" in finding.action


def test_balanced_lists_measured_phases() -> None:
    finding = rules_step.balanced_step(view(rank(shares={"forward": 0.5, "backward": 0.3})), TH)
    assert finding.kind == "BALANCED"
    assert "forward 50 %" in finding.summary
    assert "h2d" not in finding.summary


@pytest.mark.parametrize(
    ("between", "other", "action"),
    [
        (0.02, 0.22, rules_step.HOST_OTHER_ACTION),  # AMP's scaler, clipping, a manual update
        (0.22, 0.02, rules_step.HOST_BETWEEN_ACTION),  # logging, checkpoints between steps
        (0.12, 0.12, rules_step.HOST_ACTION),
    ],
)
def test_host_bound_advice_fits_where_the_time_is(
    between: float, other: float, action: str
) -> None:
    shares = {**BASE, "between": between, "other": other}
    found = rules_step.host_bound(view(rank(shares=shares)), TH)
    assert found is not None and found.action == action
