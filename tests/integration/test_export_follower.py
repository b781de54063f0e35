"""The exporters' Follower on real publishers: `--all` picks runs up as they start and lets them
go after they end; the CLI turns a wrong run or option into one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration._publisher_proc import TxLoop, make_info
from traceml.cli.main import main
from traceml.config import Settings
from traceml.export import follower as follower_module
from traceml.export.follower import Follower
from traceml.transport.publish.publisher import Publisher


def tx(runtime: Path, run_id: str) -> TxLoop:
    return TxLoop(Publisher(make_info(run_id), Settings(), runtime)).start()


def pump_until(follower: Follower, check: object, what: str, rounds: int = 400) -> None:
    for _ in range(rounds):
        follower.pump()
        if callable(check) and check():
            return
        follower._stop.wait(0.025)
    raise AssertionError(f"timed out waiting for {what}")


def steps_of(follower: Follower) -> dict[str, int]:
    return {run.run_id: run.store.total_steps(0) for run in follower.runs()}


def test_all_follows_runs_as_they_come_and_go(
    runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follower_module, "DISCOVER_S", 0.0)
    monkeypatch.setattr(follower_module, "LINGER_S", 0.0)
    follower = Follower(follow_all=True)
    alpha = tx(runtime_dir, "alpha-1")
    beta = None
    try:
        alpha.steps(30)
        pump_until(follower, lambda: steps_of(follower) == {"alpha-1": 30}, "alpha")
        beta = tx(runtime_dir, "beta-1")
        beta.steps(40)
        pump_until(
            follower, lambda: steps_of(follower) == {"alpha-1": 30, "beta-1": 40}, "beta too"
        )
        alpha.stop()  # ends the run: every rank finished
        pump_until(follower, lambda: set(steps_of(follower)) == {"beta-1"}, "alpha to go")
        beta.steps(5)
        pump_until(follower, lambda: steps_of(follower) == {"beta-1": 45}, "beta to go on")
    finally:
        follower.close()
        alpha.stop()
        if beta is not None:
            beta.stop()
    assert [run.sub for run in follower.runs()] == [None]  # closed; beta's store stays readable


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["export", "prometheus", "nosuch"], "no run matches 'nosuch'"),
        (["export", "prometheus", "--port", "70000"], "--port must be 0..65535"),
        (["export", "wandb", "x", "--every", "0"], "--every must be > 0"),
        (["export", "otlp", "--endpoint", "http://127.0.0.1:9/v1/metrics"], "no live run"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines


def test_a_finished_run_has_nothing_to_export(
    runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = tx(runtime_dir, "done-1")
    loop.steps(3)
    loop.stop()
    assert main(["export", "prometheus", "done-1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "run done-1 is finished" in line
