"""TraceML: where each PyTorch training step's time goes, live, with one code change.

    import traceml
    traceml.init(mode="auto")
    for batch in loader:
        with traceml.trace_step(model):
            ...

`import traceml` is cheap: the API loads on first use (PEP 562), and torch only at `init`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceml._version import __version__

if TYPE_CHECKING:
    from traceml.api import init, phase, show, shutdown, summary, trace_step

__all__ = ["__version__", "init", "phase", "show", "shutdown", "summary", "trace_step"]
_API = {"init", "trace_step", "phase", "shutdown", "summary", "show"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from traceml import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'traceml' has no attribute {name!r}")
