"""The JSON Schema of final_summary.json and the check of a summary against it.

Uses `jsonschema` when it is installed (a dev dependency), else a structural check of the sections
and their types. Never writes anything; failures are SchemaError with one line.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from traceml.errors import SchemaError

SUMMARY_SCHEMA = "traceml.summary/1.1"
"""The `schema` value of every summary this build writes."""
SUMMARY_READS = ("traceml.summary/1", SUMMARY_SCHEMA)
"""Versions this build reads: the same major version, minor versions up to its own (1.1 only
added fields, so a 1 summary is a valid 1.1 one without them)."""
SCHEMA_FILE = "final_summary.schema.json"

_SECTIONS: dict[str, type] = {
    "schema": str,
    "run": dict,
    "primary": dict,
    "step_time": dict,
    "step_memory": dict,
    "ranks": list,
    "system": dict,
    "findings": list,
}


@functools.lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The shipped JSON Schema (draft 2020-12), read through importlib.resources."""
    try:
        text = (resources.files("traceml") / "schemas" / SCHEMA_FILE).read_text("utf-8")
    except OSError:
        # An editable install made while `traceml` had no __init__.py maps it as a namespace
        # package, which has no resource reader: read the file beside this module instead.
        text = (Path(__file__).resolve().parent.parent / "schemas" / SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate_summary(obj: Any) -> None:
    """Raise SchemaError (one line naming the first problem) unless `obj` is a valid summary."""
    check_sections(obj)
    try:
        import jsonschema
    except ImportError:
        return
    validator = jsonschema.Draft202012Validator(load_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "top level"
        raise SchemaError(
            f"not a valid {SUMMARY_SCHEMA} summary: at {where}: {_line(error.message)}"
        )


def check_sections(obj: Any) -> None:
    """The structural check alone: a JSON object with each top-level section of its type."""
    if not isinstance(obj, dict):
        raise SchemaError(f"not a {SUMMARY_SCHEMA} summary: expected a JSON object")
    for key, kind in _SECTIONS.items():
        if not isinstance(obj.get(key), kind):
            raise SchemaError(
                f"not a valid {SUMMARY_SCHEMA} summary: section {key!r} is missing or not a"
                f" {'list' if kind is list else 'object' if kind is dict else 'string'}"
            )


def _line(message: str, limit: int = 160) -> str:
    first = message.splitlines()[0] if message else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."
