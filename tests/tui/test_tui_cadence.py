"""The panels redraw at most every PANELS_S while the header takes every snapshot: drawing a
snapshot is most of what the viewer costs beside the job. A change that matters (the run's
state, its primary finding, its ranks, the script's exit) still reaches the panels at once."""

from __future__ import annotations

import dataclasses
import itertools
import time
from functools import partial

import pytest

from tests.tui.fixtures import CannedRun, CannedSource, charts_drawn, fill, snapshot_of, until
from traceml.records import Finding, Severity
from traceml_tui import feed as feed_module
from traceml_tui import snapshot as snapshot_module
from traceml_tui.app import TraceMLApp
from traceml_tui.screens import main as main_module
from traceml_tui.screens.main import PANELS_S, panels_now
from traceml_tui.snapshot import Snapshot

pytestmark = pytest.mark.cadence


def test_the_first_snapshot_and_one_after_panels_s_are_drawn() -> None:
    snap = snapshot_of()
    assert panels_now(None, snap, 0.0)
    assert not panels_now(snap, snapshot_of(CannedRun(steps=121)), PANELS_S / 2)
    assert panels_now(snap, snapshot_of(CannedRun(steps=121)), PANELS_S)


def with_primary(snap: Snapshot, severity: Severity) -> Snapshot:
    assert snap.diagnosis is not None
    primary = dataclasses.replace(snap.diagnosis.primary, severity=severity)
    findings: tuple[Finding, ...] = (primary, *snap.diagnosis.findings[1:])
    return dataclasses.replace(
        snap, diagnosis=dataclasses.replace(snap.diagnosis, findings=findings)
    )


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: dataclasses.replace(s, child_exit=1), id="script exited"),
        pytest.param(lambda s: dataclasses.replace(s, source="summary"), id="summary"),
        pytest.param(lambda s: with_primary(s, "info"), id="primary finding's severity"),
        pytest.param(lambda s: snapshot_of(CannedRun(ranks=2)), id="rank count"),
        pytest.param(
            lambda s: dataclasses.replace(s, last_data_at=s.taken_at - 3600), id="run stalled"
        ),
    ],
)
def test_a_change_that_matters_is_drawn_at_once(change: object) -> None:
    snap = snapshot_of()
    assert callable(change)
    assert panels_now(snap, change(snap), 0.1)


async def test_the_header_takes_every_snapshot_and_the_panels_one_every_panels_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    panels_s = 3.0
    monkeypatch.setattr(snapshot_module, "STALE_AFTER_S", 3600.0)
    monkeypatch.setattr(main_module, "PANELS_S", panels_s)
    # Snapshots about 3 times a second (as data arrives every 0.25 s), so that a loaded host,
    # which spaces them out, still gives the header many more than the panels take.
    monkeypatch.setattr(feed_module, "INTERVAL_S", 0.3)
    source = CannedSource()
    app = TraceMLApp(None, source=source)
    run = CannedRun(steps=120, slow_rank=None)
    async with app.run_test(size=(120, 40)) as pilot:
        source.push(partial(fill, run=run))
        await until(pilot, lambda: charts_drawn(app, 120))
        screen = app.main
        drawn: list[float] = []
        show = screen.show

        def counted(snap: Snapshot) -> None:
            drawn.append(time.monotonic())
            show(snap)

        monkeypatch.setattr(screen, "show", counted)
        headers: list[Snapshot] = []
        steps = run.steps
        started = time.monotonic()
        # New steps every 0.25 s, as a live run sends, until the header has taken 8 snapshots
        # and more than one PANELS_S has passed: a loaded host spaces the snapshots out, and a
        # fixed 5 s window under CI's load once counted 4 headers against 2 panel draws.
        while len(headers) < 8 or time.monotonic() - started < panels_s + 1.0:
            assert time.monotonic() - started < 60, f"{len(headers)} headers in 60 s"
            more = dataclasses.replace(run, steps=steps + 10)
            source.push(partial(fill, run=more, first=steps))
            steps += 10
            header = screen.header.snapshot
            if header is not None and (not headers or header is not headers[-1]):
                headers.append(header)
            await pilot.pause(0.25)
        window = time.monotonic() - started
        assert len(headers) >= len(drawn) + 4, "the header takes every snapshot"
        most = window / panels_s + 1
        assert 1 <= len(drawn) <= most, f"the panels drew {len(drawn)} times in {window:.1f} s"
        gaps = [b - a for a, b in itertools.pairwise(drawn)]
        assert all(gap >= panels_s - 0.1 for gap in gaps), gaps
        await until(
            pilot, lambda: screen.shown is not None and screen.shown.view.total_steps == steps
        )
