"""TensorBoard side of live logging: scalars into event files, through any writer with add_scalar.

`traceml export tensorboard` writes with TensorBoard's own `tensorboard.summary.Writer` (no torch
in the exporter); in a training process, `live(writer)` takes the user's
torch.utils.tensorboard.SummaryWriter, so the points land beside the user's own curves.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from traceml.errors import ConfigError


class ScalarWriter(Protocol):
    """What both TensorBoard writers offer."""

    def add_scalar(self, tag: str, value: float, step: int) -> Any: ...
    def flush(self) -> Any: ...
    def close(self) -> Any: ...


class TensorBoardTracker:
    """Logs live points as scalars.

    Args:
        writer: A tensorboard.summary.Writer or torch's SummaryWriter.
        owned: True when we opened it (close() closes it); False for the user's writer.
    """

    name = "tensorboard"

    def __init__(self, writer: ScalarWriter, *, owned: bool) -> None:
        self.writer = writer
        self.owned = owned
        self._closed = False

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.owned:
            self.writer.close()
        else:
            self.writer.flush()


def default_logdir(run_id: str) -> Path:
    """traceml-runs/<run-id>/tensorboard under the working directory, beside the summary."""
    return Path("traceml-runs") / run_id / "tensorboard"


def open_tensorboard(run_id: str, *, logdir: str | Path | None = None) -> TensorBoardTracker:
    """A TensorBoard event file writer in `logdir` (default: default_logdir(run_id)).

    Raises:
        ConfigError: tensorboard is not installed, or the folder cannot be made.
    """
    try:
        writer_class = importlib.import_module("tensorboard.summary").Writer
    except ImportError as e:
        raise ConfigError(
            "tensorboard is not installed: pip install 'traceml-ai[tensorboard]'"
        ) from e
    path = Path(logdir) if logdir is not None else default_logdir(run_id)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot make {path}: {e.strerror}") from e
    return TensorBoardTracker(writer_class(str(path)), owned=True)
