"""`slices` against a brute force: every (producer device, consumer device) pair's overlap of row ranges."""

from __future__ import annotations

import random

from tag.strategy import Slice, slices


def _brute(producer, consumer):
    def ranges(rows):
        out, start = [], 0
        for r in rows:
            out.append((start, start + r))
            start += r
        return out

    found = []
    for dst, (c0, c1) in enumerate(ranges(consumer)):
        for src, (p0, p1) in enumerate(ranges(producer)):
            lo, hi = max(c0, p0), min(c1, p1)
            if src != dst and hi > lo:
                found.append(Slice(src, dst, lo, hi - lo))
    return sorted(found, key=lambda s: (s.dst, s.start))


def _row_map(rng, n, batch):
    if rng.random() < 0.3:  # everything on one device
        rows = [0] * n
        rows[rng.randrange(n)] = batch
        return tuple(rows)
    rows = [0] * n
    for _ in range(batch):
        rows[rng.randrange(n)] += 1
    return tuple(rows)


def test_slices_equal_the_brute_force_on_random_row_maps():
    rng = random.Random(7)
    for _ in range(5000):
        n, batch = rng.randint(1, 8), rng.randint(1, 24)
        a, b = _row_map(rng, n, batch), _row_map(rng, n, batch)
        assert slices(a, b) == _brute(a, b), (a, b)
