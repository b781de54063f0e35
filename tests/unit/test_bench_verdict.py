"""The benchmarks say whether a figure resolves the 10 µs target, not only what it read."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "_common.py"
_SPEC = importlib.util.spec_from_file_location("bench_common", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
_common = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_common)
TARGET_US, verdict = _common.TARGET_US, _common.verdict


def test_a_figure_two_standard_errors_under_the_target_is_within_it() -> None:
    assert verdict(5.0, 2.5) == "within"
    assert verdict(-3.0, 6.5) == "within"


def test_a_figure_two_standard_errors_over_the_target_is_over_it() -> None:
    assert verdict(15.4, 2.0) == "over"
    assert verdict(TARGET_US + 0.1, 0.0) == "over"


def test_a_wide_standard_error_resolves_nothing_whatever_the_mean() -> None:
    # 2026-12-07 (eleventh), pinned.py on a host 2.8x slower: each of these was printed bare
    assert verdict(-3.0, 18.6) == "unresolved"
    assert verdict(33.3, 21.0) == "unresolved"
    assert verdict(17.7, 16.3) == "unresolved"
    assert verdict(4.0, math.nan) == "unresolved"


def test_the_target_can_be_named() -> None:
    assert verdict(12.0, 1.0, target=20.0) == "within"
    assert verdict(12.0, 1.0) == "unresolved"  # 12 - 2 se is not over 10
    assert verdict(12.1, 1.0) == "over"


def test_the_bare_pairs_noise_widens_an_arm_that_came_out_tight_by_chance() -> None:
    # distributed.py, two rounds of DDP on 2 cores: the arm's spread was ten times smaller than
    # the bare pair's, and alone would have called -342 µs "within" 1 % (57 µs)
    assert verdict(-342.0, 122.5, target=57.3) == "within"
    assert verdict(-342.0, 122.5, target=57.3, noise=1120.5) == "unresolved"
    assert verdict(5.0, 1.0, noise=3.0) == "unresolved"  # 5 + 2 * 3 > 10
    assert verdict(2.0, 1.0, noise=3.0) == "within"
    assert verdict(30.0, 1.0, noise=math.nan) == "over"  # no bare pair: the arm's own
