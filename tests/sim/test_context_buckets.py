"""`SimContext.buckets`: a strategy's buckets as `derive_buckets` makes them, kept for the last strategy object only.

Three groups of 12, 20 and 6 MiB of gradients, data parallel over 2 devices, cap 25 MiB: buckets fill in backward
order (group 2 first) and a group joins while the bucket holds less than the cap, so by hand {2, 1} (6 < 25, then
26 MiB: closed) and {0} (12 MiB).
"""

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim.buckets import derive_buckets
from tag.sim.context import SimContext
from tag.strategy import Decision, Strategy, TrainingConfig

MIB = 2 ** 20


def _ctx():
    gg = make_gg([dict(param_bytes=12 * MIB, param_count=3 * MIB), dict(param_bytes=20 * MIB, param_count=20 * MIB // 4),
                  dict(param_bytes=6 * MIB, param_count=6 * MIB // 4)], [])
    return SimContext(gg, make_cluster([2]), FixedCost([1.0, 1.0, 1.0]), TrainingConfig())


def test_buckets_by_hand_and_kept_for_the_same_strategy_only():
    ctx = _ctx()
    s = Strategy(tuple(Decision((4, 4), "ring") for _ in range(3)), bucket_mb=25.0)
    got = ctx.buckets(s)
    assert [tuple(sorted(b.groups)) for b in got] == [(1, 2), (0,)]
    assert got == derive_buckets(ctx.gg, s.decisions, s.bucket_mb, ctx.choose_algorithm)
    assert ctx.buckets(s) is got  # the same object asked again: kept
    one_each = Strategy(s.decisions, bucket_mb=0.0)  # another strategy: its own buckets, not the kept ones
    assert [tuple(b.groups) for b in ctx.buckets(one_each)] == [(2,), (1,), (0,)]
    assert [tuple(sorted(b.groups)) for b in ctx.buckets(s)] == [(1, 2), (0,)]
    explicit = Strategy(s.decisions, buckets=got[:1])
    assert ctx.buckets(explicit) == got[:1]  # explicit buckets are the strategy's own
