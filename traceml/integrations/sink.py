"""`log_summary`: put a run's summary into the active W&B and/or MLflow run.

Runs after training (or at its end); it must never import a tracker the process has not asked
for: "auto" only looks at trackers already imported, because an active run implies the import.
Tracker failures are translated into IntegrationError, one line, `raise ... from e`.
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from traceml.analysis.schema import validate_summary
from traceml.analysis.summary import load_summary
from traceml.errors import TraceMLError
from traceml.integrations.flatten import FlatSummary, flatten_summary

Target = Literal["auto", "wandb", "mlflow"]
Tracker = Literal["wandb", "mlflow"]
TRACKERS: tuple[Tracker, ...] = ("wandb", "mlflow")
SINKS: dict[Tracker, str] = {
    "wandb": "traceml.integrations.wandb_sink",
    "mlflow": "traceml.integrations.mlflow_sink",
}
START_HINT: dict[Tracker, str] = {"wandb": "wandb.init()", "mlflow": "mlflow.start_run()"}
SUMMARY_NAME = "final_summary.json"


class IntegrationError(TraceMLError):
    """A tracker that is not installed, has no active run, or refused the summary."""


def _sink(tracker: Tracker) -> Any:
    return importlib.import_module(SINKS[tracker])


def _installed(tracker: Tracker) -> None:
    try:
        importlib.import_module(tracker)
    except ImportError as e:
        raise IntegrationError(
            f"{tracker} is not installed: pip install 'traceml-ai[{tracker}]'"
        ) from e


def trackers_for(to: Target) -> list[Tracker]:
    """The trackers `log_summary(to=...)` writes to.

    Raises:
        ValueError: `to` is not "auto", "wandb" or "mlflow".
        IntegrationError: the named tracker is not installed or has no active run; for "auto",
            no tracker has an active run.
    """
    if to == "auto":
        found = [t for t in TRACKERS if t in sys.modules and _sink(t).active()]
        if not found:
            raise IntegrationError(
                "no active W&B or MLflow run: call wandb.init() or mlflow.start_run() first"
            )
        return found
    if to not in TRACKERS:
        raise ValueError(f"log_summary(to={to!r}): use 'auto', 'wandb' or 'mlflow'")
    _installed(to)
    if not _sink(to).active():
        raise IntegrationError(f"no active {to} run: call {START_HINT[to]} first")
    return [to]


@contextmanager
def _summary_file(summary: Mapping[str, Any] | Path | str) -> Iterator[tuple[dict[str, Any], Path]]:
    if isinstance(summary, (str, Path)):
        path = Path(summary)
        yield load_summary(path), path
        return
    validate_summary(summary)
    with tempfile.TemporaryDirectory(prefix="traceml-") as tmp:
        path = Path(tmp) / SUMMARY_NAME
        path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        yield dict(summary), path


def log_summary(summary: Mapping[str, Any] | Path | str, *, to: Target = "auto") -> list[Tracker]:
    """Log a final summary into the active experiment-tracker run(s).

    Scalars go in as metrics (`traceml/step_time/median_ms`, ...; nulls are left out), the
    diagnoses and ids as tags (`traceml/primary` = "INPUT_BOUND", ...), and the JSON file as an
    artifact under `traceml/`.

    Args:
        summary: A "traceml.summary/1" dict, or the path of a final_summary.json.
        to: "wandb" or "mlflow"; "auto" logs to every tracker whose module is already imported
            and has an active run.

    Returns:
        The trackers written to, e.g. ["mlflow"].

    Raises:
        ValueError: `to` is not one of the three names.
        SchemaError: the summary is missing, not JSON, or not a valid summary.
        IntegrationError: no tracker to log to, or the tracker failed.
    """
    trackers = trackers_for(to)
    with _summary_file(summary) as (data, path):
        flat = flatten_summary(data)
        for tracker in trackers:
            _send(tracker, flat, path)
    return trackers


def _send(tracker: Tracker, flat: FlatSummary, path: Path) -> None:
    try:
        _sink(tracker).log(flat, path)
    except TraceMLError:
        raise
    except Exception as e:  # the tracker's own error types
        raise IntegrationError(
            f"{tracker} did not take the summary: {type(e).__name__}: {e}"
        ) from e
