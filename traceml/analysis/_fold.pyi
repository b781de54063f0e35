"""Type stub of _fold.c (the optional C folds; timeline.py, stats.py and spikes.py hold their
Python references)."""

from collections.abc import Iterable

SLOTS: int
N_PHASES: int
RECORD_LAYOUT: tuple[tuple[str, int], ...]

def timeline_fold(
    nums: list[float],
    sketch: dict[int, int],
    records: list[object],
    lo: int,
    hi: int,
    inv_log_gamma: float,
    /,
) -> bool: ...
def stats_fold(
    records: list[object],
    lo: int,
    hi: int,
    step_total: float,
    buckets: dict[int, int],
    log_gamma: float,
    phase_ms: list[float],
    phase_step_ms: list[float],
    phase_counts: list[int],
    /,
) -> tuple[float, int, int, float | None, bool] | None: ...
def block_fold(block: list[float], records: list[object], lo: int, hi: int, /) -> bool: ...
def median_step_ms(records: Iterable[object], /) -> float | None: ...
def spike_scan(
    recent: Iterable[object],
    records: list[object],
    since: int,
    ms: float | None,
    factor: float,
    keep: int,
    every: int,
    least: int,
    /,
) -> tuple[list[tuple[int, float]], int, float | None, float] | None: ...
def sketch_freeze(
    sketch: dict[int, int], count: int, gamma: float, /
) -> tuple[float, float, tuple[tuple[int, int], ...]] | None: ...
def coalesce(blocks: list[list[float]], factor: int, /) -> list[list[float]] | None: ...
def window_freeze(
    nums: list[float], sketch: dict[int, int], gamma: float, cls: type, names: tuple[str, ...], /
) -> object | None: ...
def window_merge(
    a_nums: list[float], a_sketch: dict[int, int], b_nums: list[float], b_sketch: dict[int, int], /
) -> bool: ...
