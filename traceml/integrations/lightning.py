"""`TraceMLLightningCallback`: one traced step per Lightning training batch.

Importing this module imports `lightning` (or the older `pytorch_lightning`), since the class
derives from its `Callback`; nothing else in traceml does. Hooks never change the loop.

    trainer = L.Trainer(callbacks=[TraceMLLightningCallback()])
"""

from __future__ import annotations

import importlib
from typing import Any

from traceml.integrations.boundary import StepBoundary, TraceStep

PACKAGES = ("lightning.pytorch.callbacks", "pytorch_lightning.callbacks")
"""Where `Callback` is looked for, newest package first."""


def _base() -> Any:
    for name in PACKAGES:
        try:
            return importlib.import_module(name).Callback
        except ImportError:
            continue
    raise ImportError("TraceMLLightningCallback needs lightning: pip install lightning")


class TraceMLLightningCallback(_base()):  # type: ignore[misc]
    """Marks each training batch with `traceml.trace_step(pl_module)`: on_train_batch_start
    enters it and on_train_batch_end exits it; an exception closes the open step.

    Args:
        trace_step: For tests; default `traceml.trace_step` (which starts TraceML on first use).
    """

    def __init__(self, trace_step: TraceStep | None = None) -> None:
        super().__init__()
        self.boundary = StepBoundary(trace_step)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *args: Any
    ) -> None:
        self.boundary.begin(pl_module)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, *args: Any
    ) -> None:
        self.boundary.end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.boundary.end(exception)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.boundary.end()
