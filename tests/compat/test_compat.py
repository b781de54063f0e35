"""Real loop shapes run bare and under `traceml run`: same exit code, same output, same
parameters to the bit, nothing extra on stderr but TraceML's card, and the phases measured that
the loop has (issue 11). The harness and what "TraceML's card" means: tests/compat/_harness.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.compat._harness import Pair, phases, run_case, run_traced
from tests.compat._wandb_files import wait_for_run

pytestmark = [pytest.mark.compat, pytest.mark.slow]

TRAINING = ("forward", "backward", "optimizer")
"""Phases every loop with a model and an optimizer object has."""


def kinds(summary: dict[str, Any]) -> set[str]:
    """Every finding kind of a summary, the primary one included."""
    return {summary["primary"]["kind"]} | {f["kind"] for f in summary["findings"]}


def measured(pair: Pair, *names: str) -> dict[str, float | None]:
    """Assert the phases `names` were measured (not null); return all phases."""
    found = phases(pair.summary)
    missing = [n for n in names if found[n] is None]
    assert not missing, f"not measured: {missing} in {found}"
    return found


def test_gradient_accumulation(tmp_path: Path) -> None:
    pair = run_case("grad_accum.py", tmp_path=tmp_path)
    pair.assert_same()
    summary = pair.summary
    assert summary["step_time"]["steps"] == 64  # one traced step per micro-batch
    found = measured(pair, *TRAINING, "dataloader")
    assert found["optimizer"] is not None and found["optimizer"] < 25.0
    assert not kinds(summary) & {"OPTIMIZER_BOUND", "HOST_BOUND"}, summary["findings"]


def test_amp_with_grad_scaler(tmp_path: Path) -> None:
    pair = run_case("amp.py", tmp_path=tmp_path)
    pair.assert_same()
    assert pair.bare.lines("step 7 scale=") == ["32768.0"]  # the scaler skipped step 7
    assert pair.summary["step_time"]["steps"] == 40
    assert pair.summary["run"]["exit"] == "ok"
    measured(pair, *TRAINING)


def test_dataloaders_with_workers(tmp_path: Path) -> None:
    """num_workers=2 with persistent_workers and prefetch_factor=4, then an IterableDataset."""
    pair = run_case("dataloaders.py", tmp_path=tmp_path)
    pair.assert_same()  # includes: no worker process outlives the run
    measured(pair, *TRAINING, "dataloader")
    assert pair.summary["step_time"]["steps"] == 2 * 8 + 16


def test_loop_over_a_list_then_a_generator(tmp_path: Path) -> None:
    pair = run_case("plain_loop.py", tmp_path=tmp_path)
    pair.assert_same()
    found = measured(pair, *TRAINING)
    assert found["dataloader"] is None  # no DataLoader: not measured, never a fake zero
    assert pair.summary["step_time"]["steps"] == 40


def test_ddp_then_fsdp2_wrapped_after_init(tmp_path: Path) -> None:
    pair = run_case("distributed.py", tmp_path=tmp_path, nproc=2, timeout=150)
    pair.assert_same()
    summary = pair.summary
    assert summary["run"]["world_size"] == 2
    assert [r["steps"] for r in summary["ranks"]] == [30, 30]
    measured(pair, *TRAINING)


def test_dtype_change_second_model_and_new_optimizer_mid_run(tmp_path: Path) -> None:
    pair = run_case("mid_run_changes.py", tmp_path=tmp_path)
    pair.assert_same()
    assert pair.bare.lines("dtype_a=") == ["torch.float64"]
    assert pair.summary["step_time"]["steps"] == 36
    measured(pair, *TRAINING)


def test_hugging_face_trainer(tmp_path: Path) -> None:
    pair = run_case("hf_trainer.py", "out", tmp_path=tmp_path, timeout=150)
    pair.assert_same(volatile=r"'train_runtime'")
    assert pair.bare.lines("optimizer_steps=") == ["6"]
    assert pair.summary["step_time"]["steps"] == 6  # one traced step per optimizer step
    measured(pair, *TRAINING, "dataloader")


def test_lightning_trainer(tmp_path: Path) -> None:
    pair = run_case("lightning_trainer.py", tmp_path=tmp_path, timeout=150)
    pair.assert_same()
    assert pair.summary["step_time"]["steps"] == 12
    measured(pair, *TRAINING, "dataloader")


def test_sys_exit_inside_the_loop(tmp_path: Path) -> None:
    pair = run_case("exit_in_step.py", "sys", tmp_path=tmp_path)
    pair.assert_same()
    assert pair.bare.returncode == 3
    assert pair.summary["run"]["exit"] == "error"
    assert pair.summary["step_time"]["steps"] == 11  # the step sys.exit left still counts


def test_os_exit_inside_the_loop(tmp_path: Path) -> None:
    pair = run_case("exit_in_step.py", "os", tmp_path=tmp_path)
    pair.assert_same()  # no summary can be written: os._exit skips every handler
    assert pair.bare.returncode == 4
    assert pair.bare.lines("final_loss=")


NEXT_DATA_FRAME = r'  File ".*/torch/utils/data/dataloader\.py", line \d+, in _next_data'


def test_exception_in_a_dataloader_worker(tmp_path: Path) -> None:
    pair = run_case("exit_worker_error.py", tmp_path=tmp_path)
    # The same traceback, frame for frame, but for the line of DataLoader's own `_next_data`:
    # which of its two `return self._process_data(...)` delivers the failing batch depends on
    # whether the worker's result came in order or was cached out of order (worker timing).
    pair.assert_same(volatile=NEXT_DATA_FRAME)
    assert pair.bare.returncode == 1
    assert "ValueError: corrupt record 150" in pair.bare.stderr
    assert pair.summary["run"]["exit"] == "error"


def test_exception_inside_the_forward(tmp_path: Path) -> None:
    pair = run_case("exit_forward_error.py", tmp_path=tmp_path)
    pair.assert_same()  # the same traceback, frame for frame
    assert pair.bare.returncode == 1
    assert "mat1 and mat2 shapes cannot be multiplied" in pair.bare.stderr
    assert pair.summary["run"]["exit"] == "error"


def test_keyboard_interrupt(tmp_path: Path) -> None:
    pair = run_case("exit_in_step.py", "sigint", tmp_path=tmp_path, interrupt_on="ready")
    pair.assert_same()  # the same traceback, ending in KeyboardInterrupt
    assert pair.bare.returncode == 130
    assert pair.bare.stderr.rstrip().endswith("KeyboardInterrupt")
    assert pair.summary["run"]["exit"] == "signal"


def test_wandb_offline_run_gets_the_summary(tmp_path: Path) -> None:
    run = run_traced("wandb_log.py", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.lines("logged_to=") == ["['wandb']"]
    assert not run.leftovers, run.leftovers
    summary = run.summary
    logged = wait_for_run(
        run.cwd / "wandb", lambda logged: "traceml/step_time/median_ms" in logged.summary
    )
    median = summary["step_time"]["median_ms"]
    assert json.loads(logged.summary["traceml/step_time/median_ms"]) == median
    assert json.loads(logged.config["traceml/primary"]) == summary["primary"]["kind"]
    assert f"traceml:{summary['primary']['kind']}" in logged.tags
    (kind, files), *_ = logged.artifacts.values()
    assert kind == "traceml-summary"
    assert json.loads(Path(files["final_summary.json"]).read_text()) == summary


def test_pytorch_examples_mnist_shape(tmp_path: Path) -> None:
    """pytorch/examples mnist/main.py's loop shape (our own code, synthetic images)."""
    pair = run_case("mnist_shape.py", tmp_path=tmp_path)
    pair.assert_same()
    assert len(pair.bare.lines("Test set: ")) == 2
    assert pair.summary["step_time"]["steps"] == 20
    found = measured(pair, *TRAINING, "dataloader")
    assert sum(found[p] or 0.0 for p in TRAINING) > 70.0, found  # the model and its optimizer


def test_pytorch_examples_word_language_model_shape(tmp_path: Path) -> None:
    """pytorch/examples word_language_model/main.py's loop shape: no DataLoader, no optimizer
    object (a hand-written SGD update), so those two phases are null and their time is `other`."""
    pair = run_case("word_lm_shape.py", tmp_path=tmp_path)
    pair.assert_same()
    found = measured(pair, "forward", "backward")
    assert found["dataloader"] is None and found["optimizer"] is None, found
