"""Rank rules on hand-built DDP-like RunViews: who is slow, in which phase, and by how much."""

from __future__ import annotations

import pytest

from traceml.analysis import rules_ranks
from traceml.analysis.view import RankWindow, RunView
from traceml.config import DEFAULT_THRESHOLDS as TH

BASE = {
    "dataloader": 10.0,
    "between": 2.0,
    "forward": 20.0,
    "backward": 45.0,
    "optimizer": 10.0,
    "h2d": None,
    "other": 3.0,
}
"""A 90 ms step; each test adds its own extra ms."""


def rank(r: int, steps: int = 100, **extra: float | None) -> RankWindow:
    ms = dict(BASE)
    for name, value in extra.items():
        ms[name] = None if value is None else (ms[name] or 0.0) + value
    phases = tuple(ms.values())
    step = sum(v for v in phases if v is not None)
    return RankWindow(
        rank=r,
        steps=steps,
        total_steps=steps,
        median_ms=step,
        p95_ms=step,
        mean_ms=step,
        phase_ms=phases,
        phase_share=tuple(None if v is None else v / step for v in phases),
    )


def ddp(slow: dict[int, dict[str, float]], n: int = 4, steps: int = 100) -> RunView:
    """n ranks; slow ranks get extra ms in their phases, the others wait as long in backward."""
    wait = max((sum(e.values()) for e in slow.values()), default=0.0)
    ranks = []
    for r in range(n):
        extra = slow.get(r, {})
        waited = wait - sum(extra.values())
        backward = extra.get("backward", 0.0) + waited
        ranks.append(rank(r, steps, **{**extra, "backward": backward}))
    return RunView(world_size=n, ranks=tuple(ranks), kind="summary")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [(9.9, None), (10.0, "warning"), (22.4, "warning"), (22.5, "critical"), (60.0, "critical")],
)
def test_input_straggler_thresholds(extra: float, expected: str | None) -> None:
    finding = rules_ranks.input_straggler(ddp({3: {"dataloader": extra}}), TH)
    assert (finding.severity if finding else None) == expected
    if finding is not None:
        assert finding.kind == "INPUT_STRAGGLER"
        assert finding.evidence["rank"] == 3
        assert finding.evidence["phase"] == "dataloader"
        assert "num_workers" in finding.action


def test_summary_names_rank_phase_cost_and_share() -> None:
    finding = rules_ranks.input_straggler(ddp({3: {"dataloader": 10.0}}), TH)
    assert finding is not None
    assert finding.summary == (
        "rank 3 is 10 % of a step behind the median rank before the all-reduce"
        " (+10.0 ms of a 100 ms step; dataloader +10.0 ms explains 100 %)"
    )


@pytest.mark.parametrize(
    ("extra", "kind", "phase"),
    [
        ({"dataloader": 20.0}, "INPUT_STRAGGLER", "dataloader"),
        ({"forward": 20.0}, "COMPUTE_STRAGGLER", "forward"),
        ({"between": 20.0}, "STRAGGLER", "between"),
        ({"other": 20.0}, "STRAGGLER", "other"),
        ({"dataloader": 16.0, "forward": 4.0}, "INPUT_STRAGGLER", "dataloader"),
        ({"dataloader": 15.8, "forward": 4.2}, "STRAGGLER", None),
        ({"dataloader": 10.0, "forward": 10.0}, "STRAGGLER", None),
    ],
)
def test_phase_explaining_80_percent_picks_the_kind(
    extra: dict[str, float], kind: str, phase: str | None
) -> None:
    v = ddp({2: extra})
    rules = [rules_ranks.input_straggler, rules_ranks.compute_straggler, rules_ranks.straggler]
    found = [f for f in (rule(v, TH) for rule in rules) if f is not None]
    assert [f.kind for f in found] == [kind]
    assert found[0].evidence["phase"] == phase
    if phase is None:
        assert "no single phase explains it" in found[0].summary


def test_backward_is_not_blamed_in_ddp() -> None:
    v = ddp({1: {"forward": 20.0}})
    lags = {lag.rank: lag for lag in rules_ranks.rank_lags(v, TH)}
    assert lags[1].phase == "forward"
    assert not lags[1].whole_step
    assert lags[0].lag == pytest.approx(0.0)


def test_unsynchronised_ranks_compare_the_whole_step() -> None:
    ranks = (rank(0), rank(1), rank(2), rank(3, backward=30.0))
    finding = rules_ranks.compute_straggler(RunView(world_size=4, ranks=ranks), TH)
    assert finding is not None
    assert finding.severity == "critical"
    assert "over the whole step" in finding.summary
    assert finding.evidence["phase"] == "backward"


def test_several_slow_ranks_are_named() -> None:
    v = ddp({3: {"dataloader": 30.0}, 4: {"dataloader": 12.0}}, n=6)
    finding = rules_ranks.input_straggler(v, TH)
    assert finding is not None
    assert finding.summary.startswith("ranks 3, 4 are up to")
    assert finding.evidence["ranks"] == [3, 4]


def test_different_causes_give_different_findings() -> None:
    v = ddp({1: {"dataloader": 20.0}, 4: {"forward": 20.0}}, n=6)
    inp = rules_ranks.input_straggler(v, TH)
    comp = rules_ranks.compute_straggler(v, TH)
    assert inp is not None and inp.evidence["ranks"] == [1]
    assert comp is not None and comp.evidence["ranks"] == [4]
    assert rules_ranks.straggler(v, TH) is None


@pytest.mark.parametrize(("steps", "expected"), [(19, "warning"), (20, "critical")])
def test_few_steps_cap_severity(steps: int, expected: str) -> None:
    finding = rules_ranks.input_straggler(ddp({0: {"dataloader": 50.0}}, steps=steps), TH)
    assert finding is not None
    assert finding.severity == expected


def test_single_rank_never_straggles() -> None:
    v = RunView(world_size=1, ranks=(rank(0, dataloader=500.0),))
    assert rules_ranks.rank_lags(v, TH) == []
    assert rules_ranks.input_straggler(v, TH) is None


def test_phase_unmeasured_on_some_rank_is_left_out() -> None:
    ranks = (rank(0), rank(1), rank(2, dataloader=None), rank(3, dataloader=40.0))
    v = RunView(world_size=4, ranks=ranks)
    assert rules_ranks.input_straggler(v, TH) is None
    assert all(lag.gap_ms == pytest.approx(0.0) for lag in rules_ranks.rank_lags(v, TH))


def test_unmeasured_everywhere_still_finds_compute_straggler() -> None:
    ranks = tuple(rank(r, dataloader=None, forward=25.0 if r == 1 else 0.0) for r in range(3))
    finding = rules_ranks.compute_straggler(RunView(world_size=3, ranks=ranks), TH)
    assert finding is not None
    assert finding.evidence["rank"] == 1


def test_ranks_without_steps_are_ignored() -> None:
    idle = RankWindow(rank=5)
    v = ddp({3: {"dataloader": 30.0}})
    v = RunView(world_size=5, ranks=(*v.ranks, idle))
    assert [lag.rank for lag in rules_ranks.rank_lags(v, TH)] == [0, 1, 2, 3]
