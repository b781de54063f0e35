"""MLflow side of `log_summary`: metrics, tags and the JSON artifact into the active run.

Imports mlflow only when called; `active()` never imports it (an active run means the user did).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from traceml.integrations.flatten import FlatSummary

ARTIFACT_DIR = "traceml"
"""Artifact folder of the run that receives final_summary.json."""


def active() -> bool:
    """True when mlflow is imported and a run is active in this process."""
    mlflow = sys.modules.get("mlflow")
    return mlflow is not None and mlflow.active_run() is not None


def log(flat: FlatSummary, path: Path) -> None:
    """Log metrics, set tags (tags, unlike params, may be set again) and add the artifact."""
    mlflow: Any = importlib.import_module("mlflow")
    mlflow.log_metrics(flat.metrics)
    mlflow.set_tags(flat.tags)
    mlflow.log_artifact(str(path), artifact_path=ARTIFACT_DIR)
