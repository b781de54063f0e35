"""The compat harness can fail: each of its checks catches what it is there to catch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.compat._harness import Pair, run_case

pytestmark = [pytest.mark.compat, pytest.mark.slow]


def test_each_check_catches_its_difference(tmp_path: Path) -> None:
    pair = run_case("harness_check.py", tmp_path=tmp_path, linger=1.0)
    bare, traced = pair.bare, pair.traced
    assert traced.leftovers and not bare.leftovers  # the sleeping child, found and killed
    with pytest.raises(AssertionError, match=r"stdout differs(.|\n)*\+final_loss=0\.25"):
        pair.assert_same()
    same_stdout = dataclasses.replace(traced, stdout=bare.stdout, leftovers=())
    with pytest.raises(AssertionError, match=r"stderr(.|\n)*\+warning: something changed"):
        Pair(bare, same_stdout).assert_same()
    quiet = dataclasses.replace(
        same_stdout, stderr=traced.stderr.replace("warning: something changed\n", "")
    )
    Pair(bare, quiet).assert_same()  # the card alone is not a difference
    with pytest.raises(AssertionError, match="left processes behind"):
        Pair(bare, dataclasses.replace(quiet, leftovers=traced.leftovers)).assert_same()
    assert "TraceML  harness_check.py" in traced.stderr and not bare.stderr
