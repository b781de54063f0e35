"""The summary card and the progress line: diagnosis first, every number shown, nulls as n/a."""

from __future__ import annotations

from typing import Any

import pytest

from tests.summaries import valid_summary
from traceml.analysis.render import MAX_RANK_ROWS, render_card, render_progress
from traceml.analysis.store import RunStore
from traceml.records import RankInfo, StepRecord

PHASES_MS = (30.0, 2.0, 30.0, 30.0, 5.0, None, 3.0)


def store_of(ranks: int = 1, steps: int = 100, slow: int | None = None) -> RunStore:
    store = RunStore()
    for r in range(ranks):
        store.add_info(RankInfo("run-x", r, world_size=ranks, host=f"host{r}", script="train.py"))
        dl = 30.0 + (40.0 if r == slow else 0.0)
        phases = (dl, *PHASES_MS[1:])
        step = sum(p for p in phases if p is not None)
        store.add_steps(
            [StepRecord(r, s, 0.0, step, phases, host_rss_mb=500.0) for s in range(steps)]
        )
    return store


def summary_of(store: RunStore) -> dict[str, Any]:
    return valid_summary(store, run_id="run-x", duration_s=83.0, torch_version=None)


def test_card_puts_the_diagnosis_first() -> None:
    card = render_card(summary_of(store_of())).splitlines()
    assert card[0] == "TraceML  train.py  run run-x"
    assert card[1] == "finished (ok) · 1m 23s · 100 steps · 1 rank on 1 host · cpu · torch n/a"
    assert card[3] == "CRITICAL  INPUT_BOUND"
    assert card[4] == "  dataloader 30 % of step time (30.0 ms of a 100 ms mean step)"
    assert card[5].startswith("  Next: Raise DataLoader num_workers")
    assert card.index("Step time  INPUT_BOUND") > 5


def test_card_has_a_bar_with_pct_and_ms_per_phase() -> None:
    lines = render_card(summary_of(store_of())).splitlines()
    dataloader = next(line for line in lines if line.startswith("  dataloader  "))
    assert dataloader.endswith(" 30.0 %   30.0 ms")
    assert dataloader.count("█") == round(0.3 * (80 - 36))
    assert "  h2d         not measured" in lines
    assert not any("h2d" in line and "0.0 %" in line for line in lines)


def test_card_shows_unmeasured_memory_as_na() -> None:
    card = render_card(summary_of(store_of()))
    assert "device peak" not in card
    assert "host RSS peak 500 MB · growth +0.0 MB per 1k steps" in card
    assert "GPU util n/a" in card


@pytest.mark.parametrize("width", [60, 80, 100])
def test_card_respects_width(width: int) -> None:
    card = render_card(summary_of(store_of()), width=width)
    assert max(len(line) for line in card.splitlines()) <= width


def test_single_rank_has_no_rank_table() -> None:
    assert "Ranks" not in render_card(summary_of(store_of()))


def test_rank_table_and_other_findings() -> None:
    card = render_card(summary_of(store_of(ranks=4, slow=2)))
    lines = card.splitlines()
    start = lines.index("Ranks  (lag vs the median rank, % of a step)")
    rows = lines[start + 2 : start + 6]
    assert [row.split()[0] for row in rows] == ["0", "1", "2", "3"]
    assert "+40.0" in rows[2]
    assert "Other findings" in card
    head, others = card.split("Other findings")
    assert "INPUT_STRAGGLER" in head.splitlines()[3]  # a straggler wins the tie: it is the cause
    assert "INPUT_BOUND" in others
    assert "BALANCED" not in card.split("Other findings")[1]


def test_many_ranks_show_the_laggards_and_a_count() -> None:
    card = render_card(summary_of(store_of(ranks=MAX_RANK_ROWS + 4, steps=30, slow=19)))
    assert "... 4 more ranks" in card
    assert "host19" in card


def test_progress_line() -> None:
    store = store_of(steps=50)
    line = render_progress(store.live_view())
    assert line == (
        "traceml: step 50 · 100 ms median · dataloader 30 % forward 30 % backward 30 %"
        " · INPUT_BOUND (critical)"
    )


def test_progress_waits_for_steps() -> None:
    assert render_progress(RunStore().live_view()) == "traceml: waiting for the first step"


def test_card_says_how_many_steps_tracemls_own_work_overlapped() -> None:
    store = store_of()
    quiet = render_card(summary_of(store))
    assert "TraceML's own work" not in quiet  # none overlapped: nothing to say
    store.add_steps(
        [StepRecord(0, s, 0.0, 110.0, PHASES_MS, held_ms=8.25) for s in (100, 101, 102)]
    )
    summary = summary_of(store)
    assert (summary["system"]["traceml_held_steps"], summary["system"]["traceml_held_ms"]) == (
        3,
        24.8,
    )
    card = render_card(summary, width=100)
    assert (
        "  TraceML's own work overlapped 3 steps (24.8 ms in all; not counted as spikes)"
        in card.splitlines()
    )
