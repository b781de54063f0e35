"""Another user on the same machine (`nobody`) cannot list, attach to, read or listen to a run,
over ipc (the 0700 runtime dir) or tcp (CURVE unless --insecure is said; the key is in a 0600
file). CURVE against a client without the key is covered in depth by
tests/integration/test_transport_curve.py; here it is the real job, set up from the environment.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults._harness import (
    SCRIPTS,
    check_finished,
    rank_file,
    summary_of,
    training,
)

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def _nobody_exists() -> bool:
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return True


@pytest.fixture
def shared_runtime() -> Iterator[Path]:
    """A runtime dir whose parent every user may enter, as /tmp: only TraceML's own modes (0700
    dirs, 0600 files) stand between another user and the run."""
    if os.geteuid() != 0 or not _nobody_exists():
        pytest.skip("acting as another user needs root and a `nobody` account")
    base = Path(tempfile.mkdtemp(prefix="traceml-faults-"))
    base.chmod(0o755)
    try:
        yield base / "rt"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def intrude(runtime: Path, run_id: str, endpoints: dict[str, str]) -> dict[str, object]:
    argv = [sys.executable, str(SCRIPTS / "intruder.py"), str(runtime), run_id]
    proc = subprocess.run(
        [*argv, endpoints["pub"], endpoints["ctl"]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report: dict[str, object] = json.loads(proc.stdout)
    return report


def one_clean_line(result: object) -> str:
    assert isinstance(result, dict)
    lines = result["err"].strip().splitlines()
    assert result["code"] == 2 and len(lines) == 1, result
    assert "Traceback" not in result["err"] and result["out"] == "", result
    return str(lines[0])


@pytest.mark.parametrize("listen", ["ipc", "tcp"])
def test_another_user_cannot_list_attach_read_or_listen(
    tmp_path: Path, shared_runtime: Path, listen: str
) -> None:
    stop = tmp_path / "stop"
    env = {"TRACEML_RUNTIME_DIR": str(shared_runtime), "TRACEML_LISTEN": listen}
    env.pop("TRACEML_INSECURE", None)
    run_id = f"secret-{listen}"
    with training(tmp_path, run_id, "--until", str(stop), "--steps", "100000", env=env) as job:
        job.wait_line("started")
        rank = rank_file(shared_runtime, run_id)
        report = intrude(shared_runtime, run_id, rank["endpoints"])
        stop.touch()
        result = job.finish()
    check_finished(result, summary_of(tmp_path))
    owner_unix = "connected" if listen == "ipc" else "not ipc"
    assert report["control"] == {"read": "read", "unix": owner_unix, "heard": True}
    assert report["uid"] == pwd.getpwnam("nobody").pw_uid
    assert "not to you" in one_clean_line(report["ls"])
    assert "not to you" in one_clean_line(report["attach"])
    assert report["ls_default"] == {"code": 0, "out": "no runs\n", "err": ""}
    assert report["list_runtime"] == "PermissionError"
    assert report["read"] == {"run.json": "PermissionError", "rank-0.json": "PermissionError"}
    assert report["heard"] == {"sub": False, "dealer": False, "sub_wrong_key": False}
    if listen == "ipc":
        assert report["unix"] == {"pub": "PermissionError", "ctl": "PermissionError"}
    else:
        assert rank["endpoints"]["pub"].startswith("tcp://127.0.0.1:")
        assert rank["curve_key"], "tcp without TRACEML_INSECURE must be CURVE"
