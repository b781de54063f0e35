"""The viewer's pure parts: run states in words, the feed's pacing, summaries, the log tail."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from unittest.mock import patch

import pytest

from tests.tui.fixtures import (
    T0,
    CannedRun,
    CannedSource,
    fill,
    finished_store,
    snapshot_of,
    store_of,
    summary_of,
)
from traceml.analysis.store import RunStore
from traceml.errors import TransportError
from traceml.records import RankEnd
from traceml_tui import feed as feed_module
from traceml_tui.feed import Feed
from traceml_tui.format import clock, signed_pct
from traceml_tui.snapshot import Snapshot, from_store, no_steps_text, run_state
from traceml_tui.summary_snapshot import from_summary
from traceml_tui.widgets.log_panel import LogTail, clean
from traceml_tui.widgets.phase_bars import segments


def with_states(snap: Snapshot, **states: str) -> Snapshot:
    store = RunStore()
    fill(store, CannedRun())
    for rank, state in states.items():
        store.set_rank_state(int(rank[1:]), state)  # type: ignore[arg-type]
    return from_store(store, now=snap.taken_at, last_data_at=snap.last_data_at)


@pytest.mark.parametrize(
    ("states", "word", "text", "css"),
    [
        ({}, "live", "live", "-live"),
        ({"r1": "stalled"}, "stalled", "1 of 4 ranks stalled", "-stale"),
        ({"r0": "dead", "r2": "dead"}, "dead", "2 of 4 ranks dead", "-dead"),
        ({f"r{r}": "dead" for r in range(4)}, "dead", "dead for 0 s", "-dead"),
        ({"r1": "stalled", "r2": "dead"}, "dead", "1 of 4 ranks dead", "-dead"),
    ],
)
def test_rank_states_are_said_in_words(
    states: dict[str, str], word: str, text: str, css: str
) -> None:
    snap = with_states(snapshot_of(), **states)
    state = run_state(snap, snap.taken_at)
    assert (state.word, state.text, state.css) == (word, text, css)


def test_every_other_state_is_said_in_words() -> None:
    snap = snapshot_of()
    assert run_state(None, 0).text == "connecting to the run…"
    empty = from_store(RunStore(), now=1.0, last_data_at=None)
    assert run_state(empty, 1.0).text == "waiting for the first step…"
    assert run_state(snap, snap.taken_at + 12).text == "no data for 12 s"
    assert run_state(replace(snap, child_exit=2), 0).text == "finished (exit 2)"
    done = from_store(finished_store(), now=snap.taken_at, last_data_at=None)
    assert run_state(done, 0).text == "finished (ok)"
    assert run_state(from_summary(summary_of()), 0).text == "finished (ok)"


def test_the_snapshot_holds_what_the_panels_need() -> None:
    snap = snapshot_of()
    assert [r.rank for r in snap.view.ranks] == [0, 1, 2, 3]
    assert snap.diagnosis is not None and snap.diagnosis.primary.kind == "INPUT_BOUND"
    assert snap.lags[3] == pytest.approx(0.18, abs=0.02)
    assert set(snap.system) == {0, 1, 2, 3}
    assert snap.started == 1_700_000_000.0
    assert len(snap.rank(2).device_allocated) == 100  # type: ignore[union-attr]
    assert snap.rank(7) is None
    assert sum(s for s in snap.phases.share if s is not None) == pytest.approx(1.0, abs=0.02)


def test_a_summary_becomes_a_finished_snapshot() -> None:
    summary = summary_of()
    snap = from_summary(summary, now=5.0)
    assert snap.source == "summary" and snap.taken_at == 5.0
    assert snap.view.run_id == summary["run"]["id"] and snap.view.kind == "summary"
    assert snap.diagnosis is not None
    assert snap.diagnosis.primary.kind == summary["primary"]["kind"]
    assert snap.diagnosis.memory.section == "step_memory"
    assert snap.lags[3] == pytest.approx(summary["ranks"][3]["lag_pct"] / 100)
    assert snap.phases.share[0] == pytest.approx(summary["step_time"]["dataloader_pct"] / 100)
    assert [r.state for r in snap.view.ranks] == ["finished"] * 4


def test_a_summary_without_findings_has_no_diagnosis() -> None:
    summary = summary_of()
    summary["findings"] = []
    assert from_summary(summary).diagnosis is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_feed_paces_snapshots() -> None:
    source, now = CannedSource(), FakeClock()
    posted: list[Snapshot] = []
    feed = Feed(source, posted.append, clock=now)
    feed.tick()
    assert len(posted) == 1, "the first snapshot goes out at once"
    now.now += 0.1
    source.push(lambda store: fill(store, CannedRun(steps=10)))
    feed.tick()
    assert len(posted) == 1, "new data waits for the interval"
    now.now += feed_module.INTERVAL_S
    feed.tick()
    assert len(posted) == 2 and posted[-1].view.total_steps == 10
    assert feed.last_data_at == 100.1
    now.now += feed_module.IDLE_S / 2
    feed.tick()
    assert len(posted) == 2, "no new data: nothing until IDLE_S"
    now.now += feed_module.IDLE_S / 2
    feed.tick()
    assert len(posted) == 3, "ages and states still move once a second"


def test_a_costly_snapshot_spaces_the_next_ones() -> None:
    ticks = iter([0.0, 0.3])
    feed = Feed(CannedSource(), lambda snap: None, timer=lambda: next(ticks))
    feed.snapshot(1.0)
    assert feed.interval_s == pytest.approx(0.3 / feed_module.BUILD_SHARE)


def test_a_costly_drawing_spaces_the_next_snapshots() -> None:
    drawn = [0.0]
    feed = Feed(CannedSource(), lambda snap: None, draw_s=lambda: drawn[0])
    assert feed.interval_s == feed_module.INTERVAL_S
    drawn[0] = 0.3
    assert feed.interval_s == pytest.approx(0.3 / feed_module.DRAW_SHARE)
    drawn[0] = 4.0  # one huge draw (a 1,000-row table's first) must not freeze the display
    assert feed.interval_s == feed_module.MAX_INTERVAL_S


def test_the_feed_waits_for_records_until_a_snapshot_is_due() -> None:
    """Between snapshots the feed sleeps in the source's poll, woken by records, instead of
    waking every few ms: at most PUMP_MAX_S at once, so the source's upkeep still runs."""
    now = FakeClock()
    feed = Feed(CannedSource(), lambda snap: None, clock=now)
    assert feed.wait_s(now.now) == 0.0, "the first snapshot is due at once"
    feed.tick()
    assert feed.wait_s(now.now) == feed_module.PUMP_MAX_S
    now.now += feed_module.IDLE_S - 0.1
    assert feed.wait_s(now.now) == pytest.approx(0.1), "no more than until the next is due"
    now.now += 0.2
    assert feed.wait_s(now.now) == 0.0


def test_a_woken_feed_sees_its_cancellation_at_once() -> None:
    source = CannedSource()
    feed = Feed(source, lambda snap: None)
    leaving = threading.Event()
    stopped = threading.Event()

    def run() -> None:
        # Unwoken, a minute per pump: no snapshot falls due, no cap cuts the wait short.
        with patch.multiple(feed_module, PUMP_MAX_S=60.0, IDLE_S=60.0):
            feed.run(leaving.is_set)
        stopped.set()

    threading.Thread(target=run, daemon=True).start()
    assert not stopped.wait(0.3)
    leaving.set()
    feed.wake()
    assert stopped.wait(10) and source.closed


class FailingSource(CannedSource):
    def pump(self, store: RunStore, timeout_s: float) -> bool:
        raise TransportError("the run's sockets failed")


def test_the_feed_closes_its_source_when_cancelled_or_failing() -> None:
    source = CannedSource()
    calls = iter([False, False, True])
    Feed(source, lambda snap: None).run(lambda: next(calls))
    assert source.opened and source.closed
    failing = FailingSource()
    with pytest.raises(TransportError):
        Feed(failing, lambda snap: None).run(lambda: False)
    assert failing.closed


def test_segments_fill_the_bar_exactly() -> None:
    assert sum(segments([0.45, 0.02, 0.3, 0.17, 0.04, None, 0.01], 37)) == 37
    assert segments([None, None], 10) == [0, 0]
    assert segments([0.5, 0.5], 0) == [0, 0]


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "n/a"), (4.4, "0:04"), (754, "12:34"), (3723, "1:02:03")]
)
def test_clock(seconds: float | None, text: str) -> None:
    assert clock(seconds) == text


def test_signed_pct() -> None:
    assert (signed_pct(0.18), signed_pct(-0.003), signed_pct(None)) == ("+18 %", "-0.3 %", "–")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[32mgreen\x1b[0m", "green"),
        (" 10%|█         |\r 50%|█████     |\r", " 50%|█████     |"),
        ("plain\r", "plain"),
        ("\x1b]0;title\x07text", "text"),
    ],
)
def test_log_lines_are_cleaned_like_a_terminal_shows_them(raw: str, shown: str) -> None:
    assert clean(raw) == shown


def test_the_log_tail_returns_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    tail = LogTail(path)
    assert tail.read() == [], "no file yet"
    path.write_bytes(b"one\ntw")
    assert tail.read() == ["one"]
    with path.open("ab") as f:
        f.write(b"o\nthree\n")
    assert tail.read() == ["two", "three"]
    assert tail.read() == []
    path.write_bytes(b"new\n")
    assert tail.read() == ["new"], "a truncated file is read again from its start"


def test_the_log_tail_starts_near_the_end_of_a_long_log(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    lines = LogTail(path, start_bytes=100).read()
    assert lines[-1] == "line 999" and len(lines) < 20
    assert all(line.startswith("line ") for line in lines), "the cut first line is dropped"


def test_panels_say_why_they_have_no_steps() -> None:
    assert no_steps_text(None) == "Waiting for the run…"
    assert no_steps_text(snapshot_of()) is None
    store = RunStore()
    assert no_steps_text(from_store(store, now=1.0, last_data_at=None)) == (
        "Waiting for the first step…"
    )
    store.add_end(RankEnd(0, "ok", 4000, 1.0))
    ended = no_steps_text(from_store(store, now=1.0, last_data_at=None))
    assert ended is not None and ended.startswith("No steps to show: the run ended")


def test_ddp_wait_is_shown_under_backward_only_when_measured() -> None:
    from traceml_tui.widgets.phase_bars import phase_content

    store = store_of()
    plain = phase_content(from_store(store, now=T0 + 60, last_data_at=T0 + 60), 80).plain
    assert "wait" not in plain, "no DDP wait measured: no row for it"

    rank = store.ranks()[0]
    info = store.info(rank)
    assert info is not None
    waited = [r._replace(comm_wait_ms=(r.phases[3] or 0.0) / 2) for r in store.recent(rank, 200)]
    store = RunStore()
    store.add_info(info)
    store.add_steps(waited)
    snap = from_store(store, now=T0 + 60, last_data_at=T0 + 60)
    assert snap.phases.comm_wait_share is not None
    lines = phase_content(snap, 80).plain.splitlines()
    backward = next(i for i, line in enumerate(lines) if line.startswith("backward"))
    assert lines[backward + 1].lstrip().startswith("↳ wait")


def test_the_header_says_a_restarted_run_is_a_new_incarnation() -> None:
    from traceml_tui.widgets.header import header_content

    store = store_of()
    info = store.info(store.ranks()[0])
    assert info is not None
    store.add_info(replace(info, incarnation=2))
    snap = from_store(store, now=T0 + 60, last_data_at=T0 + 60)
    assert snap.restarts == 2
    assert "restart 2" in header_content(snap, run_state(snap, T0 + 60)).plain
