"""OnceFilter: an unreachable collector is said once, not on every retry of every export."""

from __future__ import annotations

import logging

from traceml.export.otlp import OnceFilter


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("opentelemetry.x", logging.WARNING, __file__, 1, msg, args, None)


def test_each_distinct_message_passes_once_whatever_its_numbers() -> None:
    once = OnceFilter()
    retry = "Transient error %s encountered, retrying in %.2fs."
    assert once.filter(record(retry, "refused", 0.91))
    assert not once.filter(record(retry, "refused", 1.76))
    assert once.filter(record(retry, "timed out", 1.0))
    assert once.filter(record("Failed to export metrics batch"))
    assert not once.filter(record("Failed to export metrics batch"))
