"""MLflow side of live logging: metric batches with a step into a run, through MlflowClient.

Imports mlflow only when called. The client names the run explicitly, so logging from the live
thread never touches the fluent API's thread-local active run.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Mapping
from typing import Any

from traceml.errors import ConfigError
from traceml.export.live import PREFIX

DEFAULT_EXPERIMENT = "traceml"


def _tracking() -> Any:
    try:
        return importlib.import_module("mlflow.tracking")
    except ImportError as e:
        raise ConfigError("mlflow is not installed: pip install 'traceml-ai[mlflow]'") from e


class MlflowTracker:
    """Logs live points into MLflow run `run_id`.

    Args:
        client: An MlflowClient.
        run_id: The MLflow run.
        owned: True when we created it (close() ends it); False for the user's run.
    """

    name = "mlflow"

    def __init__(self, client: Any, run_id: str, *, owned: bool) -> None:
        self.client = client
        self.run_id = run_id
        self.owned = owned
        self._closed = False

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, value, now, step) for key, value in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.owned:
            self.client.set_terminated(self.run_id)


def _experiment_id(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    return str(found.experiment_id if found is not None else client.create_experiment(name))


def open_mlflow(
    run_id: str,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    mlflow_run: str | None = None,
) -> MlflowTracker:
    """An MLflow run for `run_id`: `mlflow_run` (e.g. the training script's run) if given, else
    a new run named after the TraceML run in `experiment`.

    Raises:
        ConfigError: mlflow is not installed, or the tracking server refused.
    """
    tracking = _tracking()
    try:
        client = tracking.MlflowClient(tracking_uri)
        if mlflow_run:
            client.get_run(mlflow_run)
            return MlflowTracker(client, mlflow_run, owned=False)
        exp = _experiment_id(client, experiment or DEFAULT_EXPERIMENT)
        run = client.create_run(exp, run_name=run_id, tags={f"{PREFIX}.run_id": run_id})
    except Exception as e:  # mlflow's own errors (unreachable server, no such run)
        raise ConfigError(f"mlflow refused: {type(e).__name__}: {e}") from e
    return MlflowTracker(client, run.info.run_id, owned=True)


def active_mlflow() -> MlflowTracker:
    """The user's active run in this process (mlflow.start_run() was called).

    Raises:
        ConfigError: mlflow is not imported or has no active run.
    """
    mlflow = sys.modules.get("mlflow")
    active = mlflow.active_run() if mlflow is not None else None
    if active is None:
        raise ConfigError("no active MLflow run: call mlflow.start_run() first")
    client = _tracking().MlflowClient()
    return MlflowTracker(client, active.info.run_id, owned=False)
