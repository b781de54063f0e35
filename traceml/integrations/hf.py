"""`TraceMLCallback`: one traced step per Hugging Face `Trainer` optimisation step.

Importing this module imports transformers (the class derives from `TrainerCallback`); nothing
else in traceml does. The callback never changes the Trainer's control flow (it returns None).

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[TraceMLCallback()])
"""

from __future__ import annotations

import importlib
from typing import Any

from traceml.integrations.boundary import StepBoundary, TraceStep


def _base() -> Any:
    try:
        return importlib.import_module("transformers").TrainerCallback
    except ImportError as e:
        raise ImportError("TraceMLCallback needs transformers: pip install transformers") from e


class TraceMLCallback(_base()):  # type: ignore[misc]
    """Marks each Trainer step with `traceml.trace_step(model)`: on_step_begin enters it and
    on_step_end exits it, so data loading, forward, backward and optimizer land in one step.

    With gradient accumulation one traced step is one optimizer step, all micro-batches in it.

    Args:
        trace_step: For tests; default `traceml.trace_step` (which starts TraceML on first use).
    """

    def __init__(self, trace_step: TraceStep | None = None) -> None:
        super().__init__()
        self.boundary = StepBoundary(trace_step)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.boundary.begin(kwargs.get("model"))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.boundary.end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.boundary.end()
