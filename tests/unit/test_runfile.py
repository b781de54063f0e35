"""Run files: written atomically 0600, read without following symlinks or blocking on FIFOs."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from traceml.errors import SchemaError, TransportError
from traceml.records import RankEnd, RankInfo
from traceml.transport.runfiles.runfile import (
    MAX_FILE_BYTES,
    RankFile,
    RunFile,
    read_json,
    read_rank_file,
    read_run_file,
    write_json_atomic,
)

INFO = RankInfo(run_id="r-1", rank=2, world_size=4, host="h", pid=42, started=1.0, script="t.py")
RANK = RankFile(
    info=INFO,
    pid_start=0.5,
    endpoints={"pub": "ipc:///x/p", "ctl": "ipc:///x/c"},
    curve_key=None,
    updated=3.0,
    last_step=9,
    last_step_ms=12.5,
    median_step_ms=12.0,
    last_step_t=2.5,
    primary="INPUT_BOUND",
    dropped=1,
    end=RankEnd(2, "ok", 10, 4.0),
    summary_path="/s.json",
)
RUN = RunFile("r-1", "t.py", ("--x",), "h", 42, 0.5, 1.0, 4, 3.0, None, None)


def test_rank_and_run_files_round_trip(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "rank-2.json", RANK.to_json())
    write_json_atomic(tmp_path / "run.json", RUN.to_json())
    assert read_rank_file(tmp_path / "rank-2.json") == RANK
    assert read_run_file(tmp_path / "run.json") == RUN
    assert stat.S_IMODE((tmp_path / "rank-2.json").stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_symlink_is_never_followed(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "run.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(TransportError, match="symlink"):
        read_json(tmp_path / "run.json")


def test_a_fifo_neither_blocks_nor_is_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "run.json")
    result: list[BaseException] = []

    def read() -> None:
        try:
            read_json(tmp_path / "run.json")
        except TransportError as e:
            result.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(2)
    assert not t.is_alive() and result


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"{not json", SchemaError),
        (b"[1, 2]", SchemaError),
        (b"\xff\xfe", SchemaError),
        (b" " * (MAX_FILE_BYTES + 1), TransportError),
        (b"[" * 100_000, SchemaError),
    ],
)
def test_broken_files_raise_our_errors(tmp_path: Path, content: bytes, error: type) -> None:
    (tmp_path / "run.json").write_bytes(content)
    with pytest.raises(error):
        read_json(tmp_path / "run.json")


@pytest.mark.parametrize(
    "change",
    [
        {"schema": "traceml.rank/9"},
        {"endpoints": "ipc://x"},
        {"endpoints": {"pub": 1, "ctl": "ipc:///x"}},
        {"endpoints": {"pub": "ipc:///x"}},
        {"info": [2, "r"]},
        {"updated": "now"},
        {"last_step": 1.5},
        {"end": [1, 0, "weird", 1, 1.0]},
    ],
)
def test_rank_files_of_the_wrong_shape_raise_schema_error(change: dict[str, object]) -> None:
    with pytest.raises(SchemaError):
        RankFile.from_json({**RANK.to_json(), **change})


def test_nan_cannot_be_written(tmp_path: Path) -> None:
    with pytest.raises(TransportError):
        write_json_atomic(tmp_path / "x.json", {"a": float("nan")})
