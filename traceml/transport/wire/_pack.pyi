"""Type stub of _pack.c (the optional C packer of step records; codec.py holds its reference)."""

RECORD_FIELDS: int
RECORD_LAYOUT: tuple[tuple[str, int], ...]

def pack_steps(records: object, record_type: type, version: int, /) -> list[bytes] | None: ...
