"""W&B side of `log_summary`: the run summary, config, a tag and an artifact on `wandb.run`.

Imports wandb only when called; `active()` never imports it (an active run means the user did).
Scalars go to `run.summary` (final values, not a time series that would add a step).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from traceml.integrations.flatten import PREFIX, FlatSummary

ARTIFACT_TYPE = "traceml-summary"


def active() -> bool:
    """True when wandb is imported and `wandb.run` is set."""
    wandb = sys.modules.get("wandb")
    return wandb is not None and getattr(wandb, "run", None) is not None


def log(flat: FlatSummary, path: Path) -> None:
    """Update the run summary and config, tag the run with its diagnosis, log the artifact."""
    wandb: Any = importlib.import_module("wandb")
    run = wandb.run
    run.summary.update(flat.metrics)
    run.config.update(flat.tags, allow_val_change=True)
    primary = flat.tags.get(f"{PREFIX}/primary")
    if primary:
        run.tags = (*tuple(run.tags or ()), f"traceml:{primary}")
    artifact = wandb.Artifact(f"traceml-summary-{run.id}", type=ARTIFACT_TYPE)
    artifact.add_file(str(path), name=path.name)
    run.log_artifact(artifact)
