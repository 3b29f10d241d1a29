"""Alpha-beta fits of measured transfer times: t = alpha + S / B (p2p, by regime: `fit_p2p`) and the ring
all-reduce form.

The whole-sweep fit (`fit_line`) is a least-squares line through (bytes, ms) weighted by 1/t, so each size counts by its relative
error (sizes span decades; an unweighted fit would ignore the latency of small messages). The intercept
is clamped at 0 and the slope at a tiny positive value. Units: bytes, ms, `_us`, `_gbps` = 10^9 bits/s,
as in `tag.cost.comm`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tag.cost.comm import bytes_per_ms, ring_allreduce_steps, ring_allreduce_volume_bytes


@dataclass
class AlphaBeta:
    """A fitted link: latency (us), bandwidth (10^9 bits/s), and the fit's largest relative error."""

    latency_us: float
    bandwidth_gbps: float
    max_rel_error: float


def fit_line(x: list[float], t_ms: list[float]) -> tuple[float, float]:
    """(intercept ms, slope ms per unit of x) of t = a + b x, least squares weighted by 1/t; a >= 0, b > 0.

    >>> [round(v, 6) for v in fit_line([0, 1e6, 2e6], [0.01, 1.01, 2.01])]
    [0.01, 1e-06]
    """
    x = np.asarray(x, dtype=float)
    t = np.asarray(t_ms, dtype=float)
    if len(x) == 0:
        raise ValueError("no measurements to fit")
    w = 1.0 / np.maximum(t, 1e-9)
    if len(set(x.tolist())) < 2:
        return 0.0, float(np.median(t / np.maximum(x, 1e-12)))
    a_mat = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(a_mat, t * w, rcond=None)
    if a < 0:  # refit through the origin
        a = 0.0
        b = float(np.sum(w * w * x * t) / np.sum(w * w * x * x))
    return float(a), float(max(b, 1e-15))


def _rel_error(x, t_ms, a, b) -> float:
    pred = a + b * np.asarray(x, dtype=float)
    t = np.asarray(t_ms, dtype=float)
    return float(np.max(np.abs(pred - t) / np.maximum(t, 1e-9)))


BIG_MESSAGE_BYTES = 1 << 20  # sizes at or above this fit a link's bandwidth (transfer-dominated)
TINY_MESSAGE_BYTES = 64  # a size at most this is a latency probe (its transfer term is negligible)


def fit_p2p(sizes_bytes: list[int], one_way_ms: list[float]) -> AlphaBeta:
    """Latency and bandwidth of a link from one-way transfer times: t = alpha + S / B (`comm.p2p_ms`), fitted
    by regime (Hockney's t0 and r_inf) when the sweep spans both:

    * alpha = t0 - S0 / B from the smallest size S0, when it is at most `TINY_MESSAGE_BYTES` (a latency probe);
    * 1 / B = least squares in ms through that point over the sizes S of at least `BIG_MESSAGE_BYTES`:
      ``sum S (t - t0) / (sum S^2 - S0 sum S)``, which the largest sizes decide, as they decide a gradient bucket's
      time.

    The middle sizes decide neither: a shaped NIC (a token bucket) passes them in bursts above its rate, and on
    loopback they fit in caches, so a line through every size overstates the rate of large messages. Without a
    tiny and a big size, the whole-sweep line of `fit_line`.

    >>> f = fit_p2p([4, 1024, 16384, 2 ** 20, 2 ** 22], [0.10032, 1.7, 0.7, 83.98608, 335.64432])  # 0.1 ms + S /
    >>> round(f.latency_us, 3), round(f.bandwidth_gbps, 6)  # 12500 B/ms, the middle sizes bursty as a shaped NIC
    (100.0, 0.1)
    """
    x = [float(s) for s in sizes_bytes]
    t = [float(v) for v in one_way_ms]
    big = [(s, v) for s, v in zip(x, t) if s >= BIG_MESSAGE_BYTES]
    s0 = min(x, default=0.0)
    if not big or s0 > TINY_MESSAGE_BYTES:
        a, b = fit_line(sizes_bytes, one_way_ms)
    else:
        t0 = t[x.index(s0)]  # alpha = t0 - s0 b, solved with b's normal equation
        b = max(sum(s * (v - t0) for s, v in big) / (sum(s * s for s, _ in big) - s0 * sum(s for s, _ in big)), 1e-15)
        a = max(t0 - s0 * b, 0.0)
    return AlphaBeta(a * 1e3, _gbps_from_ms_per_byte(b), _rel_error(sizes_bytes, one_way_ms, a, b))


def fit_ring_allreduce(sizes_bytes: list[int], times_ms: list[float], n: int) -> AlphaBeta:
    """Per-hop latency and bandwidth from ring all-reduce times over n ranks (`comm.ring_allreduce_ms`):
    t = 2(n-1) alpha + 2(n-1)/n S / B, so alpha = intercept / 2(n-1) and B from slope = 2(n-1)/n / B.
    """
    if n < 2:
        raise ValueError("an all-reduce fit needs at least 2 ranks")
    a, b = fit_line(sizes_bytes, times_ms)
    factor = ring_allreduce_volume_bytes(1.0, n)
    return AlphaBeta(a * 1e3 / ring_allreduce_steps(n), _gbps_from_ms_per_byte(b / factor),
                     _rel_error(sizes_bytes, times_ms, a, b))


def _gbps_from_ms_per_byte(ms_per_byte: float) -> float:
    """Bandwidth in 10^9 bits/s of a slope in ms per byte (inverse of `comm.bytes_per_ms`)."""
    return 1.0 / ms_per_byte / bytes_per_ms(1.0)
