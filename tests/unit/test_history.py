"""The bounded history: seqs keep counting while the oldest items fall out."""

from __future__ import annotations

import pytest

from traceml.transport.publish.history import History


def _filled(capacity: int, n: int) -> History[int]:
    history: History[int] = History(capacity)
    for i in range(n):
        assert history.append(i * 10) == i
    return history


@pytest.mark.parametrize(
    ("capacity", "n", "since", "expected"),
    [
        (5, 3, 0, (0, [0, 10, 20])),
        (5, 3, 2, (2, [20])),
        (5, 3, 3, (3, [])),
        (5, 3, 99, (3, [])),
        (3, 10, 0, (7, [70, 80, 90])),
        (3, 10, 8, (8, [80, 90])),
        (1, 0, 0, (0, [])),
    ],
)
def test_since(capacity: int, n: int, since: int, expected: tuple[int, list[int]]) -> None:
    assert _filled(capacity, n).since(since) == expected


def test_memory_stays_bounded() -> None:
    history = _filled(4, 1000)
    assert len(history) == 4
    assert (history.first_seq, history.next_seq) == (996, 1000)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        History(0)
