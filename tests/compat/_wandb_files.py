"""Read an offline W&B run back from its `.wandb` file, as `wandb sync` would upload it.

The file is a LevelDB-style log (a 7-byte `:W&B` header, then 32 KiB blocks of records each
with a 7-byte header: crc32, little-endian length, kind) holding `wandb.proto` Records. wandb
0.31 ships no Python reader for it, so this is one, small and strict.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = 7
FULL, LAST = 1, 4


def records(path: Path) -> Iterator[Any]:
    """Every Record of a `run-<id>.wandb` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        length = int.from_bytes(data[pos + 4 : pos + 6], "little")
        kind = data[pos + 6]
        parts += data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            yield wandb_internal_pb2.Record.FromString(parts)  # type: ignore[attr-defined]
            parts = b""


@dataclass
class OfflineRun:
    """What an offline run recorded: summary, config, tags and artifact files."""

    summary: dict[str, str] = field(default_factory=dict)
    """Key to JSON text of the value, the last update winning."""
    config: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    artifacts: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    """Artifact name to (type, {path in the artifact: local file})."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Logged rows, each {key: decoded value}, in order."""


def _key(item: Any) -> str:
    """An item's key: wandb writes a "/" key either whole or split into `nested_key`."""
    return str(item.key or "/".join(item.nested_key))


def read_run(wandb_dir: Path) -> OfflineRun:
    """The one offline run under `wandb_dir` (the `wandb/` folder of the working directory)."""
    files = sorted(wandb_dir.glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, f"expected one offline run, found {files}"
    run = OfflineRun()
    for rec in records(files[0]):
        kind = rec.WhichOneof("record_type")
        if kind == "summary":
            run.summary.update({_key(u): u.value_json for u in rec.summary.update})
        elif kind == "config":
            run.config.update({_key(u): u.value_json for u in rec.config.update})
        elif kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "run":
            run.tags = list(rec.run.tags)
        elif kind == "artifact":
            art = rec.artifact
            paths = {c.path: c.local_path for c in art.manifest.contents}
            run.artifacts[art.name] = (art.type, paths)
    return run


def wait_for_run(
    wandb_dir: Path, done: Callable[[OfflineRun], bool], timeout: float = 30.0
) -> OfflineRun:
    """The one offline run under `wandb_dir` once `done(run)` holds. wandb-core may still be
    creating or writing its file when `finish()` returns on a loaded host, so until the
    deadline a missing file, or one whose last record is half written, is read again later;
    after it, the file is read once more and what is wrong with it fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            run = read_run(wandb_dir)
        except Exception:
            run = None
        if run is not None and done(run):
            return run
        time.sleep(0.1)
    run = read_run(wandb_dir)
    assert done(run), f"the offline run under {wandb_dir} never got what the test waits for"
    return run
