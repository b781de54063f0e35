"""W&B side of live logging: points into a run of our own, a resumed run, or the active one.

Imports wandb only when called. Points carry `traceml/step` as their x-axis (define_metric), so
they never fight the user's own step counter; into the user's active run in the same process
they go with commit=False, joining the user's next row instead of adding rows of their own.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from traceml.errors import ConfigError
from traceml.export.live import PREFIX

STEP_METRIC = f"{PREFIX}/step"
DEFAULT_PROJECT = "traceml"


def _wandb() -> Any:
    try:
        return importlib.import_module("wandb")
    except ImportError as e:
        raise ConfigError("wandb is not installed: pip install 'traceml-ai[wandb]'") from e


class WandbTracker:
    """Logs live points into a wandb Run.

    Args:
        run: The wandb Run.
        owned: True when we started it (close() finishes it); False for the user's run.
    """

    name = "wandb"

    def __init__(self, run: Any, *, owned: bool) -> None:
        self.run = run
        self.owned = owned
        self._closed = False
        run.define_metric(STEP_METRIC)
        run.define_metric(f"{PREFIX}/*", step_metric=STEP_METRIC)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        row = {**metrics, STEP_METRIC: step}
        if self.owned:
            self.run.log(row)
        else:
            self.run.log(row, commit=False)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.owned:
            self.run.finish()


def open_wandb(
    run_id: str, *, project: str | None = None, resume_id: str | None = None
) -> WandbTracker:
    """A W&B run for `run_id`: resumes `resume_id` (e.g. the training script's run) if given,
    else starts one named after the TraceML run. WANDB_MODE=offline works as usual.

    Raises:
        ConfigError: wandb is not installed, or it refused to start the run.
    """
    wandb = _wandb()
    try:
        run = wandb.init(
            project=project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            id=resume_id,
            resume="allow" if resume_id else None,
            name=None if resume_id else run_id,
            job_type="traceml-live",
            config={f"{PREFIX}/run_id": run_id},
            reinit=True,
        )
    except Exception as e:  # wandb's own errors (no login, bad project)
        raise ConfigError(f"wandb could not start a run: {type(e).__name__}: {e}") from e
    return WandbTracker(run, owned=True)


def active_wandb() -> WandbTracker:
    """The user's active run in this process (wandb.init() was called).

    Raises:
        ConfigError: wandb is not imported or has no active run.
    """
    wandb = sys.modules.get("wandb")
    if wandb is None or getattr(wandb, "run", None) is None:
        raise ConfigError("no active W&B run: call wandb.init() first")
    return WandbTracker(wandb.run, owned=False)
