"""The loop shapes that broke or misread before: several models, closures, compile, checkpoints.

Each case runs bare and under `traceml run` at once (tests/compat/_harness.py) and must print the
same loss and parameters, exit the same way and add nothing to stderr but TraceML's card.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat._harness import phases, run_case
from traceml.analysis.rules_step import LBFGS_ACTION

pytestmark = [pytest.mark.compat, pytest.mark.slow]


def test_a_gan_step_is_model_compute_whichever_model_is_named(tmp_path: Path) -> None:
    pair = run_case("gan.py", tmp_path=tmp_path)
    pair.assert_same()
    summary = pair.summary
    share = phases(summary)
    assert share["forward"] is not None
    assert share["forward"] > (share["other"] or 0) + (share["between"] or 0), share
    assert summary["step_time"]["diagnosis"] != "HOST_BOUND", summary["primary"]
    assert summary["run"]["optimizers"] == ["Adam"]


def test_an_lbfgs_closure_stays_forward_and_backward(tmp_path: Path) -> None:
    pair = run_case("lbfgs.py", tmp_path=tmp_path)
    pair.assert_same()
    summary = pair.summary
    share = phases(summary)
    assert share["forward"] and share["backward"] and share["optimizer"] is not None, share
    assert summary["run"]["optimizers"] == ["LBFGS"]
    for finding in summary["findings"]:  # LBFGS's own math may well be the bottleneck
        assert "fused" not in finding["action"], finding
        if finding["kind"] == "OPTIMIZER_BOUND":
            assert finding["action"] == LBFGS_ACTION


def test_whole_model_checkpoints_reload_mid_run(tmp_path: Path) -> None:
    pair = run_case("checkpoint.py", "model.pt", tmp_path=tmp_path)
    pair.assert_same()
    assert phases(pair.summary)["forward"]


def test_a_compiled_model_is_timed_and_compiles_as_bare(tmp_path: Path) -> None:
    pair = run_case("compiled.py", tmp_path=tmp_path, timeout=150)
    pair.assert_same()  # includes dynamo's graph and graph-break counters
    summary = pair.summary
    assert phases(summary)["forward"]
    assert summary["step_time"]["diagnosis"] != "HOST_BOUND", summary["primary"]


@pytest.mark.parametrize("shape", ["distill", "actor_critic"])
def test_every_model_of_the_step_is_forward(tmp_path: Path, shape: str) -> None:
    pair = run_case("teacher_student.py", shape, tmp_path=tmp_path)
    pair.assert_same()
    share = phases(pair.summary)
    assert share["forward"] is not None
    assert share["forward"] > (share["other"] or 0) + (share["between"] or 0), share
