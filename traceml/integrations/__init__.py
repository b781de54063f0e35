"""Hand TraceML's results to the tools teams already use: W&B, MLflow, HF Trainer, Lightning.

`import traceml.integrations` is cheap: each name loads its module on first use (PEP 562), and
no module here imports torch, wandb, mlflow, transformers or lightning before it needs them.

    from traceml.integrations import log_summary, live, TraceMLCallback, TraceMLLightningCallback
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceml.integrations.boundary import StepBoundary
    from traceml.integrations.flatten import FlatSummary, flatten_summary
    from traceml.integrations.hf import TraceMLCallback
    from traceml.integrations.lightning import TraceMLLightningCallback
    from traceml.integrations.sink import IntegrationError, log_summary
    from traceml.integrations.trackers import live

__all__ = [
    "FlatSummary",
    "IntegrationError",
    "StepBoundary",
    "TraceMLCallback",
    "TraceMLLightningCallback",
    "flatten_summary",
    "live",
    "log_summary",
]
_HOME = {
    "FlatSummary": "flatten",
    "flatten_summary": "flatten",
    "IntegrationError": "sink",
    "log_summary": "sink",
    "StepBoundary": "boundary",
    "TraceMLCallback": "hf",
    "TraceMLLightningCallback": "lightning",
    "live": "trackers",
}
"""Where each name lives: a module of this package, or a full module path."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'traceml.integrations' has no attribute {name!r}")
    path = home if home.startswith("traceml.") else f"traceml.integrations.{home}"
    value = getattr(importlib.import_module(path), name)
    globals()[name] = value
    return value
