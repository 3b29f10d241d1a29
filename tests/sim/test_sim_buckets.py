"""Gradient buckets (`tag.sim.buckets`): boundaries worked out by hand on a toy model.

Groups 0..4 own 4, 10, 20, 8 and 30 MiB of parameters. Gradients become ready in reverse order (group 4 first);
a group joins the open bucket while that bucket holds fewer than the cap, on the same devices and sync.
"""

from __future__ import annotations

import pytest

from tag.sim.buckets import MIB, bucket_syncs, check_buckets, derive_buckets, own_sync_bytes
from tag.strategy import Bucket, Decision, Strategy

from simkit_builders import make_gg

SIZES_MIB = [4, 10, 20, 8, 30]


def _gg(sizes=SIZES_MIB):
    groups = [dict(param_bytes=s * MIB, param_count=s * MIB // 4) for s in sizes]
    return make_gg(groups, [(g, g + 1, 4.0, 0.0) for g in range(len(sizes) - 1)])


def _ring(devices, nbytes):
    return "ring"


def _groups(buckets):
    return [b.groups for b in buckets]


@pytest.mark.parametrize("cap_mib, expected", [
    # cap 25: g4 (30) fills its bucket; g3 (8) opens one, g2 joins at 8 < 25 (28); g1 opens, g0 joins at 10 (14)
    (25.0, [(4,), (3, 2), (1, 0)]),
    (0.0, [(4,), (3,), (2,), (1,), (0,)]),  # version 1: one bucket per group
    (100.0, [(4, 3, 2, 1, 0)]),  # 30, 38, 58, 68 are all < 100
    (30.0, [(4,), (3, 2, 1), (0,)]),  # 30 is not < 30; 8, 28 < 30 then 38; g0 alone
])
def test_bucket_boundaries_by_hand(cap_mib, expected):
    gg = _gg()
    decs = tuple(Decision((2, 2), "ring") for _ in SIZES_MIB)
    assert _groups(derive_buckets(gg, decs, cap_mib, _ring)) == expected


def test_a_different_sync_or_replica_set_closes_the_bucket():
    gg = _gg()
    decs = [Decision((2, 2), "ring") for _ in SIZES_MIB]
    decs[2] = Decision((2, 2), "ps", server=1)  # a ps group cannot share a ring bucket
    decs[0] = Decision((4, 0))  # on one device: nothing to sync
    buckets = derive_buckets(gg, tuple(decs), 100.0, _ring)
    assert _groups(buckets) == [(4, 3), (2,), (1,)]
    assert [b.algorithm for b in buckets] == ["ring", "ps", "ring"]
    assert buckets[1].server == 1
    syncs = bucket_syncs(gg, Strategy(tuple(decs), 100.0), buckets)
    assert [s.nbytes / MIB for s in syncs] == [38, 20, 10]
    assert [s.devices for s in syncs] == [(0, 1)] * 3


def test_auto_buckets_ask_for_the_cheapest_algorithm_per_bucket():
    gg = _gg()
    decs = tuple(Decision((2, 2), "auto") for _ in SIZES_MIB)
    asked = []

    def choose(devices, nbytes):
        asked.append((devices, nbytes / MIB))
        return "tree" if nbytes < 20 * MIB else "ring"

    buckets = derive_buckets(gg, decs, 25.0, choose)
    assert asked == [((0, 1), 30), ((0, 1), 28), ((0, 1), 14)]
    assert [b.algorithm for b in buckets] == ["ring", "ring", "tree"]


def test_shared_and_sfb_bytes_leave_the_bucket():
    gg = _gg([4, 10])
    gg.graph.tensors["w_shared"] = type("T", (), {"numel": MIB // 4, "itemsize": 4})()  # 1 MiB
    gg.shared_params = {"w_shared": [1, 0]}  # synced on its own, owned by its first group (0 after sorting)
    own = own_sync_bytes(gg, (Decision((2, 2), "ring"), Decision((2, 2), "ring")))
    assert [b / MIB for b in own] == [3, 10]


def test_explicit_buckets_are_checked_against_the_decisions():
    gg = _gg()
    decs = [Decision((2, 2), "ring") for _ in SIZES_MIB]
    s = Strategy(tuple(decs), 25.0)
    good = (Bucket((4,), "ring"), Bucket((3, 2), "ring"), Bucket((1, 0), "ring"))
    assert check_buckets(gg, s, good) is None
    assert "group 0" in check_buckets(gg, s, good[:2] + (Bucket((1,), "ring"),))  # group 0 in no bucket
    assert "already" in check_buckets(gg, s, good + (Bucket((0,), "ring"),))
    decs[3] = Decision((3, 1), "ring")  # same devices, other rows: still one replica set
    assert check_buckets(gg, Strategy(tuple(decs), 25.0), good) is None
    decs[3] = Decision((0, 4))  # one device: nothing to sync, cannot be in a bucket
    assert "no gradients" in check_buckets(gg, Strategy(tuple(decs), 25.0), good)
