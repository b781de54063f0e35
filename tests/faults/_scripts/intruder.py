"""Another user on the same machine tries to see a run: started as root, it loads what it needs,
drops to `nobody`, then tries `traceml ls`, `traceml attach`, reading the run's files and talking
to its endpoints. Prints one JSON object with what each attempt got.

    python intruder.py RUNTIME_DIR RUN_ID PUB_ENDPOINT CTL_ENDPOINT

It cannot simply be exec'd as nobody: the interpreter lives under /root (0700), so it starts as
root and drops privileges in-process, after every import. Before dropping them it makes the same
attempts as the run's owner would (with the CURVE key from the rank file): that control shows the
probes below can succeed, so their failing as nobody means something.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import socket
import sys
import time
from pathlib import Path
from typing import Any

import zmq

from traceml.cli.main import build_parser, main
from traceml.transport.wire.control import Request
from traceml.transport.wire.security import make_client, new_keypair


def cli(*argv: str, runtime: str | None) -> dict[str, Any]:
    if runtime is None:
        os.environ.pop("TRACEML_RUNTIME_DIR", None)
    else:
        os.environ["TRACEML_RUNTIME_DIR"] = runtime
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # the point: a crash is reported, not hidden
            code, err = 99, io.StringIO(f"Traceback: {type(e).__name__}: {e}")
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def read(path: Path) -> str:
    try:
        path.read_bytes()
    except OSError as e:
        return type(e).__name__
    return "read"


def listdir(path: Path) -> str:
    try:
        os.listdir(path)
    except OSError as e:
        return type(e).__name__
    return "listed"


def unix(endpoint: str) -> str:
    if not endpoint.startswith("ipc://"):
        return "not ipc"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(endpoint.removeprefix("ipc://"))
        except OSError as e:
            return type(e).__name__
    return "connected"


LISTEN_S = 1.5


def probe_socket(
    ctx: zmq.Context[zmq.Socket[bytes]], kind: int, endpoint: str, key: str | None
) -> zmq.Socket[bytes]:
    """A SUB (subscribed to all) or a DEALER (with a snapshot request sent), as a CURVE client
    of the server key `key` when given, connected to `endpoint`."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if key is not None:
        make_client(sock, key)
    if kind == zmq.SUB:
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    if kind == zmq.DEALER:
        # A DEALER queues on a connection in progress; one that the server has already refused
        # (a client without CURVE against a CURVE server, over tcp) leaves none, and the send
        # is refused too. Then no request reached the server: it cannot answer, as asserted.
        with contextlib.suppress(zmq.Again):
            sock.send(Request("snapshot", 1).pack(), zmq.NOBLOCK)
    return sock


def heard(socks: dict[str, zmq.Socket[bytes]]) -> dict[str, bool]:
    """Which of `socks` receive anything within LISTEN_S, listening to all of them at once."""
    poller = zmq.Poller()
    for sock in socks.values():
        poller.register(sock, zmq.POLLIN)
    silent = dict(socks)
    deadline = time.monotonic() + LISTEN_S
    while silent and (left := deadline - time.monotonic()) > 0:
        ready = dict(poller.poll(int(left * 1000) + 1))
        for name, sock in list(silent.items()):
            if sock in ready:
                poller.unregister(sock)
                del silent[name]
    for sock in socks.values():
        sock.close(0)
    return {name: name not in silent for name in socks}


def control(ctx: zmq.Context[zmq.Socket[bytes]], run: Path, pub: str) -> dict[str, Any]:
    """The owner's view, before dropping privileges."""
    key = json.loads((run / "rank-0.json").read_text()).get("curve_key")
    return {
        "read": read(run / "rank-0.json"),
        "unix": unix(pub),
        "heard": heard({"sub": probe_socket(ctx, zmq.SUB, pub, key)})["sub"],
    }


def drop_to_nobody() -> None:
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)


def main_() -> int:
    runtime, run_id, pub, ctl = sys.argv[1:5]
    build_parser()  # imports every subcommand module while we still can read the interpreter
    run = Path(runtime) / run_id
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    owner = control(ctx, run, pub)
    drop_to_nobody()
    fake = new_keypair().public
    report = {
        "control": owner,
        "uid": os.getuid(),
        "ls": cli("ls", "--all", runtime=runtime),
        "ls_default": cli("ls", "--all", runtime=None),
        "attach": cli("attach", run_id, runtime=runtime),
        "list_runtime": listdir(Path(runtime)),
        "read": {name: read(run / name) for name in ("run.json", "rank-0.json")},
        "unix": {"pub": unix(pub), "ctl": unix(ctl)},
        "heard": heard(
            {
                "sub": probe_socket(ctx, zmq.SUB, pub, None),
                "dealer": probe_socket(ctx, zmq.DEALER, ctl, None),
                "sub_wrong_key": probe_socket(ctx, zmq.SUB, pub, fake),
            }
        ),
    }
    ctx.term()
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main_())
