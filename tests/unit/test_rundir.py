"""The runtime dir: created 0700, refused when it is a symlink, open to others, or not ours."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from traceml.errors import TransportError
from traceml.transport.runfiles.rundir import (
    MAX_IPC_PATH,
    RunDir,
    default_runtime_dir,
    ensure_private_dir,
)


def test_default_is_env_then_tmp_per_user() -> None:
    assert default_runtime_dir({"TRACEML_RUNTIME_DIR": "/x/y"}) == Path("/x/y")
    assert default_runtime_dir({}) == Path(f"/tmp/traceml-{os.getuid()}")


def test_create_makes_private_dirs(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / "rt", "run-1").create()
    for path in (run_dir.root, run_dir.path):
        assert stat.S_IMODE(path.lstat().st_mode) == 0o700
    assert run_dir.rank_json(3).name == "rank-3.json"
    assert run_dir.log_path.name == "output.log"


def test_a_symlinked_dir_is_refused(tmp_path: Path) -> None:
    real = ensure_private_dir(tmp_path / "real")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(TransportError, match="symlink"):
        ensure_private_dir(tmp_path / "link")


def test_a_dir_open_to_others_is_refused(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir(mode=0o755)
    os.chmod(tmp_path / "open", 0o755)
    with pytest.raises(TransportError, match="chmod 700"):
        ensure_private_dir(tmp_path / "open")


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(TransportError, match="not a directory"):
        ensure_private_dir(tmp_path / "f")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to chown")
def test_another_users_dir_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    os.chown(other, 12345, 12345)
    with pytest.raises(TransportError, match="uid 12345"):
        ensure_private_dir(other)


@pytest.mark.parametrize("run_id", ["../x", ".hidden", "a/b", ""])
def test_unsafe_run_ids_are_refused(tmp_path: Path, run_id: str) -> None:
    with pytest.raises(TransportError, match="cannot name a directory"):
        RunDir(tmp_path, run_id)


def test_ipc_endpoints_only_when_they_fit(tmp_path: Path) -> None:
    assert RunDir(tmp_path, "r").ipc_endpoint(0, "pub") == f"ipc://{tmp_path}/r/rank-0.pub.sock"
    deep = tmp_path / ("d" * MAX_IPC_PATH)
    assert RunDir(deep, "r").ipc_endpoint(0, "pub") is None


def test_link_summary_points_at_the_summary_and_can_move(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / "rt", "run-1").create()
    for name in ("a.json", "b.json"):
        run_dir.link_summary(tmp_path / name)
        assert os.readlink(run_dir.summary_link) == str(tmp_path / name)
