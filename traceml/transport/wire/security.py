"""CURVE encryption for tcp endpoints: a key pair per publisher, the public key in its 0600 file.

A viewer without the public key (another user: the run files are private) cannot complete the
handshake, so it receives nothing. ipc endpoints rely on the 0700 runtime dir instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import zmq

from traceml.errors import TransportError


@dataclass(frozen=True, slots=True)
class KeyPair:
    """Z85-encoded CURVE keys."""

    public: str
    secret: str


def new_keypair() -> KeyPair:
    """A fresh key pair (TransportError if this libzmq was built without CURVE)."""
    if not zmq.has("curve"):
        raise TransportError(
            "this libzmq has no CURVE support: use ipc, or pass --insecure to allow plain tcp"
        )
    public, secret = zmq.curve_keypair()
    return KeyPair(public.decode("ascii"), secret.decode("ascii"))


def make_server(sock: zmq.Socket[bytes], keys: KeyPair) -> None:
    """Make `sock` a CURVE server with `keys`; call before bind."""
    sock.curve_secretkey = keys.secret.encode("ascii")
    sock.curve_publickey = keys.public.encode("ascii")
    sock.curve_server = True


def make_client(sock: zmq.Socket[bytes], server_key: str) -> None:
    """Make `sock` a CURVE client of the server with public key `server_key`; call before connect.

    Raises:
        TransportError: the key is not a valid Z85 CURVE key.
    """
    client = new_keypair()
    try:
        sock.curve_serverkey = server_key.encode("ascii")
        sock.curve_publickey = client.public.encode("ascii")
        sock.curve_secretkey = client.secret.encode("ascii")
    except (zmq.ZMQError, UnicodeEncodeError) as e:
        raise TransportError(f"bad CURVE key in the run file: {e}") from e
