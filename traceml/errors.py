"""TraceML's own error types: foreign errors are translated into these at the boundary.

The CLI prints a TraceMLError as one line on stderr and exits with code 2; anything else is a bug.
"""

from __future__ import annotations


class TraceMLError(Exception):
    """A problem the user can act on. `str(err)` is one line that says what and what to do."""

    def __init__(self, msg: str, title: str = "") -> None:
        super().__init__(msg)
        self.msg = msg
        self.title = title


class ConfigError(TraceMLError):
    """Bad settings, arguments or paths."""


class SchemaError(TraceMLError):
    """A record, frame or summary that is not of a schema version this build understands."""


class TransportError(TraceMLError):
    """Run files, endpoints or sockets that cannot be used."""


class RunNotFoundError(TransportError):
    """No run matches the id or prefix the user gave."""
