"""DDP all-reduce wait in the store, the summary, the straggler evidence and the card."""

from __future__ import annotations

from typing import Any

import pytest

from tests.summaries import valid_summary
from traceml.analysis.comm import CommTotals
from traceml.analysis.render import render_card
from traceml.analysis.rules_ranks import with_comm_wait
from traceml.analysis.store import RunStore
from traceml.records import Finding, RankInfo, StepRecord


def ddp_store(steps: int = 60, history: int = 4096, measured: bool = True) -> RunStore:
    """Rank 1 loads data 10 ms slower; rank 0 waits for it in backward's all-reduce."""
    store = RunStore(history_steps=history)
    for r in (0, 1):
        store.add_info(RankInfo("run-d", r, world_size=2, host="box", script="ddp.py"))
        dl = 12.0 if r == 1 else 2.0
        backward = 14.0 if r == 0 else 4.5
        wait = (10.0 if r == 0 else 0.5) if measured else None
        phases = (dl, 0.5, 3.0, backward, 1.0, None, 0.5)
        step = sum(p for p in phases if p is not None)
        store.add_steps(
            [StepRecord(r, s, 0.0, step, phases, comm_wait_ms=wait) for s in range(steps)]
        )
    return store


def summary_of(store: RunStore) -> dict[str, Any]:
    return valid_summary(store, run_id="run-d", duration_s=3.0, torch_version=None)


def test_totals_count_only_measured_steps() -> None:
    phases = (1.0, 0.0, 1.0, 2.0, 0.0, None, 0.0)
    recs = [StepRecord(0, s, 0.0, 20.0, phases, comm_wait_ms=5.0) for s in range(3)]
    recs.append(StepRecord(0, 3, 0.0, 100.0, phases))
    totals = CommTotals.of(recs)
    assert (totals.steps, totals.share, totals.mean_ms) == (3, 0.25, 5.0)
    assert CommTotals.merged([totals, CommTotals()]).share == 0.25
    assert CommTotals().share is None and CommTotals().mean_ms is None


@pytest.mark.parametrize("history", [4096, 8], ids=["exact ring", "segments"])
def test_store_totals_after_warm_up(history: int) -> None:
    store = ddp_store(history=history)
    comm = store.comm_totals()
    assert comm[0].steps == comm[1].steps == 55, "the first 5 steps are warm-up"
    assert comm[0].mean_ms == pytest.approx(10.0)
    assert store.comm_totals("live")[1].mean_ms == pytest.approx(0.5)


def test_summary_shows_the_wait_per_rank_and_median() -> None:
    s = summary_of(ddp_store())
    rows = {r["rank"]: r for r in s["ranks"]}
    assert rows[0]["comm_wait_pct"] == pytest.approx(100 * 10.0 / 21.0, abs=0.1)
    assert rows[1]["comm_wait_pct"] == pytest.approx(100 * 0.5 / 21.5, abs=0.1)
    assert s["step_time"]["comm_wait_pct"] == pytest.approx(
        (rows[0]["comm_wait_pct"] + rows[1]["comm_wait_pct"]) / 2, abs=0.1
    )
    straggler = next(f for f in s["findings"] if f["kind"] == "INPUT_STRAGGLER")
    assert straggler["evidence"]["comm_wait_ms"] == {"0": 10.0}
    assert "rank 0 waits 10.0 ms/step for rank 1" in straggler["summary"]
    assert s["primary"]["summary"] == straggler["summary"]


def test_unmeasured_wait_is_null_not_zero() -> None:
    s = summary_of(ddp_store(measured=False))
    assert s["step_time"]["comm_wait_pct"] is None
    assert all(r["comm_wait_pct"] is None for r in s["ranks"])
    straggler = next(f for f in s["findings"] if f["kind"] == "INPUT_STRAGGLER")
    assert "comm_wait_ms" not in straggler["evidence"]
    assert "waits" not in render_card(s)


def test_card_shows_the_wait_under_backward_and_per_rank() -> None:
    card = render_card(summary_of(ddp_store()))
    lines = card.splitlines()
    backward = next(i for i, line in enumerate(lines) if line.strip().startswith("backward"))
    assert "comm wait" in lines[backward + 1] and "25.0 %" in lines[backward + 1]
    assert "wait %" in card
    row0 = next(line for line in lines if line.strip().startswith("0  box"))
    assert "47.6" in row0


def test_other_findings_are_left_alone() -> None:
    finding = Finding("INPUT_BOUND", "step_time", "warning", "s", "a", {"x": 1})
    assert with_comm_wait(finding, {0: 3.0}) is finding
    straggler = Finding("STRAGGLER", "ranks", "warning", "s", "a", {"ranks": [1], "rank": 1})
    assert with_comm_wait(straggler, {1: 3.0}) is straggler, "only the slow rank measured"
