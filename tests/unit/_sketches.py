"""Random timeline sketches for the tests of their quantiles (Python and C)."""

from __future__ import annotations

import random


def random_sketch(rng: random.Random, keys: range, buckets: int, most: int) -> dict[int, int]:
    """1..`buckets` buckets drawn from `keys`, each holding 1..`most` values, and one time in
    five the zero bucket (values of 0 ms) besides."""
    sketch = {key: rng.randint(1, most) for key in rng.sample(keys, rng.randint(1, buckets))}
    if rng.random() < 0.2:
        sketch[0] = rng.randint(1, 3)
    return sketch
