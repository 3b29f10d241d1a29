"""Measured series made non-decreasing in size before a cost model reads them.

A profile measures each op, group and copy at a few sizes (row counts, or bytes for the sync copies). More rows or
bytes never take less work, but at sub-millisecond times the measurements are noisy and can fall: a group timed
slower at 16 rows than at 32. Read as measured, such a series makes a micro-batch cheaper than its half, and a
pipeline's predicted step wrong by the difference times the micro-batch count.

`monotone` replaces a series y_1..y_n (sizes increasing) by its least-squares non-decreasing fit:
argmin over z_1 <= ... <= z_n of sum_i (y_i - z_i)^2, by pooling adjacent violators: scanning left to right, a value
below the block before it is merged into that block, whose value is the mean of its members, and merging repeats
while blocks are out of order. Equivalently z_k = max_{i <= k} min_{j >= k} mean(y_i..y_j). A series that is
already non-decreasing is kept as it is, and the fit's sum equals the series' sum.

`monotone_db` applies it to every size series of a profile (`tag.cost.profile_types.ProfileDB`): each op's forward
and backward, the step block's group forward and backward and its rest-of-step per row count, and the sync-copy
and fill times per bucket size. The step's optimizer update (a median, one figure) and the contention block are
left as they are. Interpolation between fitted points (`interpolate`) is then non-decreasing everywhere,
extrapolation included.
"""

from __future__ import annotations

import copy
from dataclasses import replace


def monotone(ys: list[float]) -> list[float]:
    """The least-squares non-decreasing fit of `ys` (module docstring).

    >>> monotone([1.0, 3.0, 2.0, 4.0]), monotone([2.0, 1.0, 0.0])
    ([1.0, 2.5, 2.5, 4.0], [1.0, 1.0, 1.0])
    """
    blocks: list[list[float]] = []  # [sum, count] per pooled block, values non-decreasing left to right
    for y in ys:
        blocks.append([float(y), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out += [s / c] * int(c)
    return out


def _fit(ys):
    return None if ys is None else monotone(list(ys))


def monotone_db(db):
    """A copy of profile `db` with every size series fitted by `monotone` (module docstring); `db` is unchanged."""
    out = copy.copy(db)
    out.ops = {sig: replace(p, fwd_ms=_fit(p.fwd_ms), bwd_ms=_fit(p.bwd_ms)) for sig, p in db.ops.items()}
    st = db.step
    if st is not None:
        out.step = replace(
            st, groups=[replace(g, fwd_ms=_fit(g.fwd_ms), bwd_ms=_fit(g.bwd_ms)) for g in st.groups],
            other_ms=_fit(st.other_ms), copy_in_ms=_fit(st.copy_in_ms), copy_out_ms=_fit(st.copy_out_ms),
            fill_ms=_fit(st.fill_ms))
    return out
