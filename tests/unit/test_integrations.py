"""traceml.integrations: flattening, log_summary into MLflow (real, file store) and W&B, and the
HF / Lightning callbacks' step boundaries, down to a real session in a subprocess."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.summaries import valid_summary
from traceml.analysis.store import RunStore
from traceml.analysis.summary import load_summary, write_summary
from traceml.errors import SchemaError
from traceml.integrations import IntegrationError, StepBoundary, flatten_summary, log_summary
from traceml.records import RankInfo, StepRecord

PHASES = (40.0, 2.0, 25.0, 25.0, 5.0, None, 3.0)
HEAVY = ("torch", "wandb", "mlflow", "transformers", "lightning", "pytorch_lightning")


def make_summary() -> dict[str, Any]:
    store = RunStore()
    store.add_info(RankInfo("int-run", 0, host="h", script="train.py"))
    store.add_steps([StepRecord(0, s, 0.0, 100.0, PHASES, host_rss_mb=300.0) for s in range(50)])
    return valid_summary(store, run_id="int-run", argv=["--lr", "1"])


@pytest.fixture
def summary_file(tmp_path: Path) -> Path:
    return write_summary(make_summary(), tmp_path / "run" / "final_summary.json")


def modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {m.split(".")[0] for m in out.stdout.split()}


@pytest.mark.parametrize(
    "statement",
    [
        "import traceml.integrations",
        "from traceml.integrations import log_summary, flatten_summary, StepBoundary",
    ],
)
def test_importing_integrations_loads_no_framework(statement: str) -> None:
    assert not modules_after(statement) & set(HEAVY)


def test_flatten_keeps_numbers_and_words_and_drops_nulls() -> None:
    flat = flatten_summary(make_summary())
    assert flat.metrics["traceml/step_time/median_ms"] == 100.0
    assert flat.metrics["traceml/step_time/steps_per_s"] == 10.0
    assert flat.metrics["traceml/step_time/dataloader_pct"] == 40.0
    assert flat.metrics["traceml/step_memory/host_rss_peak_mb"] == 300.0
    assert flat.metrics["traceml/run/world_size"] == 1.0
    assert flat.metrics["traceml/findings"] >= 1.0
    assert "traceml/step_time/h2d_pct" not in flat.metrics  # null: not measured, not 0
    assert "traceml/step_memory/device_peak_allocated_mb" not in flat.metrics
    assert "traceml/ranks/max_lag_pct" not in flat.metrics
    assert flat.tags["traceml/primary"] == "INPUT_BOUND"
    assert flat.tags["traceml/primary_severity"] == "critical"
    assert flat.tags["traceml/step_time/diagnosis"] == "INPUT_BOUND"
    assert flat.tags["traceml/run/id"] == "int-run"
    assert "traceml/run/argv" not in flat.tags
    assert all(isinstance(v, float) for v in flat.metrics.values())


def test_no_flat_key_is_a_path_prefix_of_another() -> None:
    flat = flatten_summary(make_summary())
    keys = sorted([*flat.metrics, *flat.tags])
    assert len(keys) == len(set(keys))
    assert not [(a, b) for a in keys for b in keys if b.startswith(a + "/")]


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import mlflow  # in the dev extra: never skipped after `make install`

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    yield mlflow
    while mlflow.active_run() is not None:
        mlflow.end_run()


def logged(mlflow: Any, run_id: str) -> tuple[dict[str, float], dict[str, str], list[str]]:
    client = mlflow.tracking.MlflowClient()
    run = client.get_run(run_id)
    artifacts = [a.path for a in client.list_artifacts(run_id, "traceml")]
    return run.data.metrics, run.data.tags, artifacts


@pytest.mark.parametrize("source", ["path", "dict"])
def test_log_summary_into_a_real_mlflow_run(
    mlflow_store: Any, summary_file: Path, source: str
) -> None:
    summary: Any = summary_file if source == "path" else load_summary(summary_file)
    with mlflow_store.start_run() as run:
        assert log_summary(summary) == ["mlflow"]
        assert log_summary(summary, to="mlflow") == ["mlflow"]  # again: tags may be set twice
    metrics, tags, artifacts = logged(mlflow_store, run.info.run_id)
    assert metrics["traceml/step_time/median_ms"] == 100.0
    assert metrics["traceml/step_time/steps_per_s"] == 10.0
    assert tags["traceml/primary"] == "INPUT_BOUND"
    assert artifacts == ["traceml/final_summary.json"]
    client = mlflow_store.tracking.MlflowClient()
    local = client.download_artifacts(run.info.run_id, "traceml/final_summary.json")
    assert json.loads(Path(local).read_text())["run"]["id"] == "int-run"


def test_mlflow_without_an_active_run(mlflow_store: Any, summary_file: Path) -> None:
    with pytest.raises(IntegrationError, match=r"no active mlflow run: call mlflow\.start_run"):
        log_summary(summary_file, to="mlflow")


def test_auto_with_no_active_run_says_what_to_call(
    summary_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    mlflow = sys.modules.get("mlflow")
    assert mlflow is None or mlflow.active_run() is None
    with pytest.raises(IntegrationError, match="no active W&B or MLflow run"):
        log_summary(summary_file)


def test_a_tracker_that_is_not_installed(
    summary_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(IntegrationError, match=r"pip install 'traceml-ai\[wandb\]'"):
        log_summary(summary_file, to="wandb")


def test_bad_target_and_bad_summary(summary_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="use 'auto', 'wandb' or 'mlflow'"):
        log_summary(summary_file, to="neptune")  # type: ignore[arg-type]
    fake_run = FakeWandb()
    with fake_wandb(fake_run), pytest.raises(SchemaError, match="no summary at"):
        log_summary(tmp_path / "missing.json")
    with fake_wandb(fake_run), pytest.raises(SchemaError, match="section 'ranks'"):
        log_summary({**make_summary(), "ranks": None})
    assert fake_run.calls == []


class FakeWandb:
    """Records what the W&B sink does with `wandb.run`. Kept for what a real run cannot be made
    to do on demand: refuse an update, or prove that nothing at all was called."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.id = "abc123"
        self.tags: tuple[str, ...] = ("baseline",)
        self.fail = fail
        self.summary = types.SimpleNamespace(update=lambda d: self._call("summary", d))
        self.config = types.SimpleNamespace(
            update=lambda d, allow_val_change: self._call("config", d)
        )

    def _call(self, name: str, value: Any) -> None:
        if self.fail:
            raise RuntimeError("server said no\nsecond line")
        self.calls.append((name, value))

    def log_artifact(self, artifact: Any) -> None:
        self.calls.append(("artifact", (artifact.name, artifact.type, artifact.text)))


@contextmanager
def fake_wandb(run: FakeWandb) -> Iterator[None]:
    class Artifact:
        def __init__(self, name: str, type: str) -> None:  # noqa: A002 (wandb's own name)
            self.name, self.type, self.text = name, type, ""

        def add_file(self, path: str, name: str) -> None:
            self.text = Path(path).read_text()

    module = types.ModuleType("wandb")
    module.run = run  # type: ignore[attr-defined]
    module.Artifact = Artifact  # type: ignore[attr-defined]
    saved = sys.modules.get("wandb")
    sys.modules["wandb"] = module
    try:
        yield
    finally:
        if saved is None:
            del sys.modules["wandb"]
        else:
            sys.modules["wandb"] = saved


def test_a_tracker_error_becomes_one_integration_error(summary_file: Path) -> None:
    with fake_wandb(FakeWandb(fail=True)), pytest.raises(IntegrationError) as info:
        log_summary(summary_file, to="wandb")
    assert str(info.value).startswith("wandb did not take the summary: RuntimeError: server")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_log_summary_into_a_real_offline_wandb_run(summary_file: Path, offline_wandb: Path) -> None:
    """A real offline run, read back from its .wandb file: summary, config, tags, artifact."""
    import wandb

    from tests.compat._wandb_files import wait_for_run

    run = wandb.init(project="traceml-test")
    try:
        assert log_summary(summary_file) == ["wandb"]
        assert run.summary["traceml/step_time/median_ms"] == 100.0
        assert run.config["traceml/primary"] == "INPUT_BOUND"
        assert "traceml:INPUT_BOUND" in (run.tags or ())
    finally:
        run.finish()
    logged = wait_for_run(
        offline_wandb, lambda logged: "traceml/step_time/median_ms" in logged.summary
    )
    assert json.loads(logged.summary["traceml/step_time/median_ms"]) == 100.0
    assert json.loads(logged.config["traceml/primary"]) == "INPUT_BOUND"
    assert "traceml:INPUT_BOUND" in logged.tags
    kind, files = logged.artifacts[f"traceml-summary-{run.id}"]
    assert kind == "traceml-summary"
    assert json.loads(Path(files["final_summary.json"]).read_text())["run"]["id"] == "int-run"


class FakeTrace:
    """Stands in for traceml.trace_step: records enter/exit in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def __call__(self, model: Any) -> AbstractContextManager[None]:
        events = self.events

        class Ctx:
            def __enter__(self) -> None:
                events.append(("enter", model))

            def __exit__(self, *exc: object) -> None:
                events.append(("exit", exc[0]))

        return Ctx()


def test_step_boundary_pairs_hooks_and_survives_missed_ones() -> None:
    trace = FakeTrace()
    boundary = StepBoundary(trace)
    boundary.end()  # an end with no start: nothing
    boundary.begin("m")
    states = [boundary.is_open]
    boundary.end()
    boundary.begin("m")
    boundary.begin("m")  # the end hook was skipped: close the open step first
    boundary.end(ValueError("boom"))
    states.append(boundary.is_open)
    assert states == [True, False]
    assert trace.events == [
        ("enter", "m"),
        ("exit", None),
        ("enter", "m"),
        ("exit", None),
        ("enter", "m"),
        ("exit", ValueError),
    ]
    assert boundary.steps == 3


def test_hf_callback_opens_a_step_per_optimizer_step() -> None:
    hf = importlib.import_module("traceml.integrations.hf")  # the real TrainerCallback
    trace = FakeTrace()
    callback = hf.TraceMLCallback(trace_step=trace)
    args, state, control, model = object(), object(), object(), object()
    callback.on_train_begin(args, state, control, model=model)
    for _ in range(3):
        callback.on_step_begin(args, state, control, model=model, optimizer=None)
        callback.on_substep_end(args, state, control, model=model)
        assert callback.on_step_end(args, state, control, model=model) is None
    callback.on_step_begin(args, state, control, model=model)
    callback.on_train_end(args, state, control, model=model)  # closes a step left open
    assert trace.events == [("enter", model), ("exit", None)] * 4
    assert callback.boundary.steps == 4


def test_lightning_callback_opens_a_step_per_batch() -> None:
    pl = importlib.import_module("traceml.integrations.lightning")  # the real Callback
    trace = FakeTrace()
    callback = pl.TraceMLLightningCallback(trace_step=trace)
    trainer, module = object(), object()
    for i in range(2):
        callback.on_train_batch_start(trainer, module, ("x", "y"), i)
        callback.on_train_batch_end(trainer, module, {"loss": 1.0}, ("x", "y"), i)
    callback.on_train_batch_start(trainer, module, ("x", "y"), 2)
    callback.on_exception(trainer, module, KeyboardInterrupt())
    callback.on_train_end(trainer, module)
    assert trace.events == [
        ("enter", module),
        ("exit", None),
        ("enter", module),
        ("exit", None),
        ("enter", module),
        ("exit", KeyboardInterrupt),
    ]


@pytest.mark.parametrize(
    ("module", "blocked", "message"),
    [
        ("traceml.integrations.hf", ("transformers",), "needs transformers"),
        (
            "traceml.integrations.lightning",
            # the submodules too: a test before may have imported the real ones
            ("lightning.pytorch.callbacks", "pytorch_lightning.callbacks"),
            "needs lightning",
        ),
    ],
)
def test_callbacks_without_their_framework_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, blocked: tuple[str, ...], message: str
) -> None:
    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=message):
        importlib.import_module(module)


SESSION = textwrap.dedent(
    """
    import json, sys
    import torch
    import traceml
    from torch.utils.data import DataLoader, TensorDataset
    from traceml.integrations import TraceMLCallback, TraceMLLightningCallback

    steps = int(sys.argv[2])
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    if sys.argv[1] == "hf":
        cb = TraceMLCallback()
        begin = lambda i: cb.on_step_begin(None, None, None, model=model)
        end = lambda i: cb.on_step_end(None, None, None, model=model)
    else:
        cb = TraceMLLightningCallback()
        begin = lambda i: cb.on_train_batch_start(None, model, None, i)
        end = lambda i: cb.on_train_batch_end(None, model, None, None, i)
    done = 0
    while done < steps:
        for x, y in loader:  # the framework fetches the batch, then calls the start hook
            begin(done)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            end(done)
            done += 1
            if done == steps:
                break
    print(traceml.shutdown())
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["hf", "lightning"])
def test_callbacks_drive_a_real_session(tmp_path: Path, framework: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(SESSION)
    summary_path = tmp_path / "summary.json"
    env = {**os.environ, "TRACEML_SUMMARY": str(summary_path), "TRACEML_PUBLISH": "0"}
    proc = subprocess.run(
        [sys.executable, str(script), framework, "30"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(summary_path)
    summary = load_summary(summary_path)
    step = summary["step_time"]
    assert step["steps"] == 30
    assert step["forward_pct"] is not None  # the model handed to the hook was watched
    assert step["backward_pct"] is not None
    assert step["dataloader_pct"] is not None


REAL_HF = """
import sys, torch
from transformers import Trainer, TrainingArguments
from traceml.integrations import TraceMLCallback
import traceml

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.lin(x), labels)}

data = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(64)]
args = TrainingArguments(output_dir=sys.argv[1], max_steps=12, per_device_train_batch_size=4,
                         report_to=[], save_strategy="no", logging_strategy="no",
                         remove_unused_columns=False, use_cpu=True)
callback = TraceMLCallback()
Trainer(model=Tiny(), args=args, train_dataset=data, callbacks=[callback]).train()
assert callback.boundary.steps == 12, callback.boundary.steps
traceml.shutdown()
"""

REAL_LIGHTNING = """
import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from traceml.integrations import TraceMLLightningCallback
import traceml

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4)
callback = TraceMLLightningCallback()
L.Trainer(max_steps=12, callbacks=[callback], logger=False, enable_checkpointing=False,
          enable_progress_bar=False, enable_model_summary=False,
          accelerator="cpu").fit(Tiny(), loader)
assert callback.boundary.steps == 12, callback.boundary.steps
traceml.shutdown()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "code"), [("transformers", REAL_HF), ("lightning", REAL_LIGHTNING)]
)
def test_callbacks_in_the_real_framework(tmp_path: Path, framework: str, code: str) -> None:
    summary_path = tmp_path / "summary.json"
    env = {**os.environ, "TRACEML_SUMMARY": str(summary_path), "TRACEML_PUBLISH": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert load_summary(summary_path)["step_time"]["steps"] == 12
