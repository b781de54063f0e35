"""How the view words a run that ended, died, or has not sent its history yet (fixes 5 and 7)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from tests.tui.fixtures import T0, CannedRun, finished_store, snapshot_of, store_of, until
from tests.tui.test_tui_panels import text
from tests.unit._runfiles import dead_pid, write_run
from traceml.analysis.store import RunStore
from traceml.records import SystemSample
from traceml_tui.app import TraceMLApp
from traceml_tui.snapshot import exit_words, from_store, run_state, stall_text
from traceml_tui.source import open_run
from traceml_tui.summary_snapshot import from_summary
from traceml_tui.widgets.diagnosis import DiagnosisPanel, diagnosis_content
from traceml_tui.widgets.header import RunHeader
from traceml_tui.widgets.system import SystemPanel

SIZE = (120, 40)


def test_one_wording_for_a_clean_end() -> None:
    from tests.tui.fixtures import summary_of

    summary = from_summary(summary_of())
    assert run_state(summary, summary.taken_at).text == "finished (ok)"
    assert exit_words(0) == "finished (ok)", "exit 0 reads as a summary's ok"
    assert exit_words(1) == "finished (exit 1)"
    assert exit_words(137) == "killed by SIGKILL (out of memory?) (exit 137)"
    finished = snapshot_of(store=finished_store())
    assert run_state(finished, finished.taken_at).text == "finished (ok)"


def test_attached_before_the_history_arrived_it_says_it_is_fetching() -> None:
    snap = from_store(RunStore(), now=T0, last_data_at=None, known_steps=2_500)
    assert run_state(snap, T0).text == "fetching the history (2,500 steps)…"


async def test_after_the_run_ended_the_system_panel_stops_counting() -> None:
    run = CannedRun()
    store = finished_store(run)
    now = T0 + 600  # ten minutes after the last sample
    store.add_system(SystemSample(rank=3, t=T0 + 5, process_cpu_pct=50.0))
    snap = from_store(store, now=now, last_data_at=T0 + 10)
    app = TraceMLApp(None, source=snap)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.shown is not None)
        system = app.main.query_one(SystemPanel)
        assert "No system sample for" not in text(system)
        assert "the last sample before the run ended" in text(system)
        assert not system.has_class("-stale")
        header = text(app.main.query_one(RunHeader))
        assert "ran 0:10" in header, "the clock stopped with the run"


async def test_a_dead_run_shows_what_its_files_know(runtime_dir: Path) -> None:
    died = time.time() - 300
    write_run(runtime_dir, "dead-run", pid=dead_pid(), started=died - 60, updated=died)
    snap = open_run("dead-run", runtime_dir=runtime_dir)
    assert not hasattr(snap, "pump"), "nothing is left to subscribe to"
    app = TraceMLApp(None, source=snap)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.shown is not None)
        header = text(app.main.query_one(RunHeader))
        assert "step 101" in header and "dead for 5 min" in header and "ran 1:00" in header
        diagnosis = text(app.main.query_one(DiagnosisPanel))
        assert "died after 101 steps" in diagnosis and "20.0 ms" in diagnosis
        assert "INPUT_BOUND" in diagnosis and "5 min ago" in diagnosis
        shown = app.main.shown
        assert shown is not None
        app.main.show(dataclasses.replace(shown, taken_at=time.time() + 60))
        await pilot.pause()
        assert "ran 1:00" in text(app.main.query_one(RunHeader)), "no counting up"


def test_a_stalled_rank_says_for_how_long_no_step_ended() -> None:
    run = CannedRun()
    store = store_of(run)
    store.set_rank_state(1, "stalled")
    store.set_phase(1, "dataloader")  # as its heartbeats say
    last_end = T0 + (run.steps - 1) * 0.027 + 0.03
    snap = from_store(store, now=last_end + 25, last_data_at=last_end + 24)
    assert snap.worst == 1, "a stalled rank is listed (and charted) first"
    stall = stall_text(snap)
    assert stall is not None
    assert stall.startswith("rank 1 stalled: no step ended for 25 s after step 120, in dataloader")
    assert "⚠ rank 1 stalled" in diagnosis_content(snap).plain
    assert stall_text(snapshot_of()) is None
