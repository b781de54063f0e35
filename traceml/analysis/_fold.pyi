"""Type stub of _fold.c (the optional C fold; timeline.py is its reference)."""

SLOTS: int
N_PHASES: int

def timeline_fold(
    nums: list[float],
    sketch: dict[int, int],
    records: list[object],
    lo: int,
    hi: int,
    inv_log_gamma: float,
    /,
) -> bool: ...
