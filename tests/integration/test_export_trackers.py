"""Live logging into real trackers, read back from what each wrote: W&B offline run files, an
MLflow file store through MlflowClient, TensorBoard event files. A real publisher feeds them."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration._publisher_proc import TxLoop, make_info
from tests.integration._transport_helpers import wait_for
from traceml.config import Settings
from traceml.export.follower import Follower
from traceml.export.live import LiveLogger, Tracker, follow_live
from traceml.transport.publish.publisher import Publisher

RUN = "live-1"
KEYS = {
    "traceml/step_time/median_ms",
    "traceml/step_time/dataloader_pct",
    "traceml/step_time/backward_pct",
    "traceml/step_memory/host_rss_mb",
}


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[TxLoop]:
    pub = Publisher(make_info(RUN), Settings(), tmp_path / "rt")
    (tmp_path / "rt").mkdir(mode=0o700)
    with TxLoop(pub) as tx:
        yield tx


def log_two_points(tmp_path: Path, loop: TxLoop, tracker: Tracker) -> None:
    """Two points, at 100 and 150 steps, then close (which logs nothing new)."""
    follower = Follower(RUN, runtime_dir=tmp_path / "rt").start()
    logger = LiveLogger(follower, tracker, every_s=3600)
    try:
        for n in (100, 150):
            loop.steps(n - loop.next_step)
            wait_for(lambda n=n: follower.runs()[0].store.total_steps(0) >= n, 10)  # type: ignore[misc]
            assert logger.log_once()
        assert not logger.log_once()  # no progress, no point
    finally:
        logger.close()
        follower.close()
    assert logger.logged == 2 and logger.failed is None


def test_mlflow_file_store(tmp_path: Path, loop: TxLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from traceml.export.mlflow_tracker import open_mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps it behind a flag

    uri = (tmp_path / "mlruns").as_uri()
    tracker = open_mlflow(RUN, tracking_uri=uri, experiment="exp")
    log_two_points(tmp_path, loop, tracker)
    client = MlflowClient(uri)
    run = client.get_run(tracker.run_id)
    assert run.info.run_name == RUN and run.info.status == "FINISHED"
    assert set(run.data.metrics) >= KEYS
    history = client.get_metric_history(tracker.run_id, "traceml/step_time/median_ms")
    assert [(m.step, m.value) for m in history] == [(100, 10.0), (150, 10.0)]
    dl = client.get_metric_history(tracker.run_id, "traceml/step_time/dataloader_pct")
    assert [m.value for m in dl] == pytest.approx([30.0, 30.0])
    assert "traceml/step_time/h2d_pct" not in run.data.metrics  # not measured


def _scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    # tensorboard ships no type information: reached through importlib, typed Any
    events = importlib.import_module("tensorboard.backend.event_processing.event_accumulator")
    acc = events.EventAccumulator(str(logdir))
    acc.Reload()
    out: dict[str, list[tuple[int, float]]] = {}
    for tag in acc.Tags()["tensors"]:
        out[tag] = [(e.step, float(e.tensor_proto.float_val[0])) for e in acc.Tensors(tag)]
    for tag in acc.Tags()["scalars"]:
        out[tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
    return out


def test_tensorboard_event_files(tmp_path: Path, loop: TxLoop) -> None:
    from traceml.export.tensorboard_tracker import open_tensorboard

    log_two_points(tmp_path, loop, open_tensorboard(RUN, logdir=tmp_path / "tb"))
    scalars = _scalars(tmp_path / "tb")
    assert set(scalars) >= KEYS
    assert scalars["traceml/step_time/median_ms"] == [(100, 10.0), (150, 10.0)]


def test_live_in_process_finds_its_own_run(tmp_path: Path, loop: TxLoop) -> None:
    """`live(writer)` in a rank with no single-rank session of its own (as a multi-rank job's
    rank 0): it finds the run this process is a rank of and follows it over its sockets."""
    writer = importlib.import_module("tensorboard.summary").Writer(str(tmp_path / "tb"))
    loop.steps(120)
    logger = follow_live(writer, every_s=0.2, runtime_dir=tmp_path / "rt")
    try:
        wait_for(lambda: logger.logged >= 1, 10, "a first point")
    finally:
        logger.close()
        writer.close()
    assert not logger.follower.alive
    assert scalars_steps(tmp_path / "tb")[-1] == 120


def test_live_in_a_single_rank_process_reads_its_own_store(
    tmp_path: Path, session_env: Path
) -> None:
    """`live(writer)` in a one-rank training process reads the store its tx thread folds: the
    rank gets no subscriber in its own process (it keeps folding once a second, packs nothing,
    and nothing decodes its records again), and the last point counts every step."""
    torch = pytest.importorskip("torch")
    import traceml
    from traceml import api
    from traceml.export.live import OwnStore
    from traceml.integrations import live

    traceml.init(mode="auto", summary=session_env)
    session = api.current_session()
    assert session is not None and session.worker is not None
    writer = importlib.import_module("tensorboard.summary").Writer(str(tmp_path / "tb"))
    logger = live(writer, every_s=0.05)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        assert isinstance(logger.follower, OwnStore)
        for i in range(150):
            with traceml.trace_step(model):
                opt.zero_grad()
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
            if i == 60:
                wait_for(lambda: logger.logged >= 1, 10, "a point while the loop runs")
        (publisher,) = session.worker.p.sinks
        assert isinstance(publisher, Publisher) and not publisher.watched
    finally:
        logger.close()
        writer.close()
    assert not logger.follower.alive
    assert scalars_steps(tmp_path / "tb")[-1] == 150  # the last point, after a flush


def scalars_steps(logdir: Path) -> list[int]:
    return [step for step, _ in _scalars(logdir).get("traceml/step_time/median_ms", [])]


BLOCK = 32768
"""W&B's transaction log is LevelDB's log format after a 7-byte ":W&B" header: 32 KiB blocks of
records, each with a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""


@pytest.mark.slow  # wandb.init starts wandb-core, a subprocess
def test_wandb_offline_run(tmp_path: Path, loop: TxLoop, offline_wandb: Path) -> None:
    from tests.compat._wandb_files import wait_for_run
    from traceml.export.wandb_tracker import open_wandb

    tracker = open_wandb(RUN, project="traceml-test")
    log_two_points(tmp_path, loop, tracker)
    rows = wait_for_run(offline_wandb, lambda run: len(run.history) >= 2).history
    assert [r["traceml/step"] for r in rows] == [100, 150]
    assert set(rows[0]) >= KEYS
    assert rows[1]["traceml/step_time/median_ms"] == 10.0


@pytest.mark.slow
def test_cli_logs_until_the_run_ends(tmp_path: Path, runtime_dir: Path) -> None:
    """`traceml export tensorboard RUN` as a user runs it: points while the run goes, a last one
    at its end, then exit 0 by itself."""
    import os
    import signal
    import subprocess

    from tests.conftest import child_env, traceml_cmd
    from tests.integration._transport_helpers import publisher_process

    logdir = tmp_path / "tb"
    with publisher_process(runtime_dir, "cli-1", "--backlog", "50", "--rate", "100") as pub:
        exporter = subprocess.Popen(
            traceml_cmd(
                "export", "tensorboard", "cli-1", "--every", "0.3", "--logdir", str(logdir)
            ),
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        assert exporter.stderr is not None
        assert "logging cli-1 to tensorboard" in exporter.stderr.readline()
        wait_for(lambda: logdir.is_dir() and len(scalars_steps(logdir)) >= 2, 20, "points")
        os.kill(pub.pid, signal.SIGTERM)
        assert exporter.wait(20) == 0, exporter.stderr.read()
    steps = scalars_steps(logdir)
    assert steps == sorted(set(steps)) and steps[0] >= 50
