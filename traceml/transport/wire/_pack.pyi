"""Type stub of _pack.c (the optional C packer and decoder of step records; codec.py holds
their references)."""

RECORD_FIELDS: int
RECORD_LAYOUT: tuple[tuple[str, int], ...]

def pack_steps(records: object, record_type: type, version: int, /) -> list[bytes] | None: ...
def unpack_steps(
    body: bytes, record_type: type, version: int, n_phases: int, /
) -> tuple[object, ...] | None: ...
