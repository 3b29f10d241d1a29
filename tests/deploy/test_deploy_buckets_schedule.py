"""Which parameters each deployed collective sums: the plan's buckets on ranks (tag.deploy.bucket_plan).

The toy model's groups own (float32 bytes, worked out from `_deploy_toy.TOY_PARAMS`): group 0 b1 (16) + W3 (16x8) =
64 + 512 = 576 B, group 1 W2 (16x8) = 512 B, group 2 none, group 3 W4 (4x16) + b4 (4) = 256 + 16 = 272 B; W1 (16x8) is
tied between groups 0 and 3 and syncs on its own. Buckets fill in reverse backward order (3, 1, 0), a group joining
while the open bucket holds fewer than the cap's bytes.
"""

from __future__ import annotations

import pytest

from tag.deploy.schedule import build_schedule
from tag.errors import InputError
from tag.strategy import Bucket, Decision, Strategy
from _deploy_toy import TOY_GROUPS, toy_graph

MACHINES = ["m0", "m0", "m1", "m1"]
MIB = 2 ** 20


def _sched(decs, bucket_mb=0.0, buckets=None, nproc=None):
    return build_schedule(toy_graph(12), TOY_GROUPS, Strategy(tuple(decs), bucket_mb, buckets), MACHINES, nproc,
                          plan_file="p.json")


def _view(s):
    return [(b.groups, b.method, b.ranks, b.params) for b in s.buckets]


def test_cap_zero_gives_one_bucket_per_group_in_reverse_backward_order():
    s = _sched([Decision((3, 3, 3, 3), "ring")] * 4)
    assert _view(s) == [((3,), "ring", (0, 1, 2, 3), ("W4", "b4")), ((1,), "ring", (0, 1, 2, 3), ("W2",)),
                        ((0,), "ring", (0, 1, 2, 3), ("b1", "W3")), ((), "ring", (0, 1, 2, 3), ("W1",))]


def test_cap_closes_a_bucket_once_it_holds_the_cap():
    # cap 600 B: group 3 opens (272 < 600), group 1 joins (784), group 0 finds 784 >= 600 and opens its own
    s = _sched([Decision((3, 3, 3, 3), "tree")] * 4, bucket_mb=600 / MIB)
    assert [(b.groups, b.params) for b in s.buckets] == [((3, 1), ("W4", "b4", "W2")), ((0,), ("b1", "W3")),
                                                         ((), ("W1",))]
    assert {b.method for b in s.buckets} == {"tree"}
    # cap 800 B: 784 < 800, so group 0 joins too
    s = _sched([Decision((3, 3, 3, 3), "tree")] * 4, bucket_mb=800 / MIB)
    assert [b.groups for b in s.buckets] == [(3, 1, 0), ()]


def test_other_replica_sets_or_algorithms_start_new_buckets():
    # group 1 on devices 0, 1 only: it cannot share a bucket with groups 3 and 0 (all four devices)
    decs = [Decision((3, 3, 3, 3), "hierarchical"), Decision((6, 6, 0, 0), "hierarchical"), Decision((12, 0, 0, 0)),
            Decision((3, 3, 3, 3), "hierarchical")]
    s = _sched(decs, bucket_mb=25)
    assert [(b.groups, b.ranks) for b in s.buckets] == [((3,), (0, 1, 2, 3)), ((1,), (0, 1)), ((0,), (0, 1, 2, 3)),
                                                        ((), (0, 1, 2, 3))]
    decs[1] = Decision((3, 3, 3, 3), "leader")
    s = _sched(decs, bucket_mb=25)
    assert [(b.groups, b.method) for b in s.buckets] == [((3,), "hierarchical"), ((1,), "leader"),
                                                         ((0,), "hierarchical"), ((), "hierarchical")]


def test_explicit_buckets_are_taken_as_given_with_ps_server_rank():
    decs = [Decision((3, 3, 3, 3), "auto")] * 4  # explicit buckets carry the algorithm: auto is no obstacle
    buckets = (Bucket((3,), "ps", 1), Bucket((1, 0), "leader"))
    s = _sched(decs, buckets=buckets)
    assert _view(s)[:2] == [((3,), "ps", (0, 1, 2, 3), ("W4", "b4")), ((1, 0), "leader", (0, 1, 2, 3),
                                                                       ("W2", "b1", "W3"))]
    assert s.buckets[0].server == 1
    assert (s.buckets[2].groups, s.buckets[2].method) == ((), "ring")  # the tied W1 under auto: ring


def test_devices_sharing_a_rank_leave_the_sum_to_the_other_ranks():
    # 4 devices on 2 ranks (devices 0, 1 -> rank 0; 2, 3 -> rank 1); a ps server on device 3 is rank 1
    decs = [Decision((3, 3, 3, 3), "ring"), Decision((6, 6, 0, 0), "ring"), Decision((12, 0, 0, 0)),
            Decision((3, 3, 3, 3), "ps", 3)]
    s = _sched(decs, nproc=2)
    # group 1 runs on devices 0, 1: one rank, nothing to sum
    assert [(b.groups, b.method, b.ranks, b.server) for b in s.buckets] == [
        ((3,), "ps", (0, 1), 1), ((0,), "ring", (0, 1), None), ((), "ring", (0, 1), None)]


def test_auto_without_buckets_is_an_input_error_naming_the_fix():
    decs = [Decision((3, 3, 3, 3), "ring"), Decision((3, 3, 3, 3), "auto"), Decision((12, 0, 0, 0)),
            Decision((3, 3, 3, 3), "ring")]
    with pytest.raises(InputError) as e:
        _sched(decs, bucket_mb=25)
    msg = str(e.value)
    assert msg.startswith("p.json: decisions[1].sync: expected an algorithm") and "buckets" in msg
    assert "\n" not in msg


def test_buckets_mixing_replica_sets_are_an_input_error():
    decs = [Decision((3, 3, 3, 3), "ring"), Decision((6, 6, 0, 0), "ring"), Decision((12, 0, 0, 0)),
            Decision((3, 3, 3, 3), "ring")]
    with pytest.raises(InputError, match=r"p.json: buckets\[0\].groups"):
        _sched(decs, buckets=(Bucket((3, 1), "ring"), Bucket((0,), "ring")))


def test_process_groups_each_algorithm_needs():
    from tag.deploy.comm import Comm
    from tag.deploy.schedule import SyncBucket

    machines = ["m0", "m0", "m1", "m1", "m1"]

    def sets(method, ranks):
        return sorted(set(Comm.needed_sets([SyncBucket(method, ranks, None, ("w",))], [], machines)))

    everyone = (0, 1, 2, 3, 4)
    # hierarchical: machines hold 2 and 3 ranks -> 2 shards; shard j is all-reduced by the j-th rank of each machine
    assert sets("hierarchical", everyone) == [(0, 1, 2, 3, 4), (0, 2), (1, 3)]
    # leader: each machine's ranks, and the leaders (first rank of each machine)
    assert sets("leader", everyone) == [(0, 1), (0, 1, 2, 3, 4), (0, 2), (2, 3, 4)]
    # ring, tree and ps run on the bucket's own ranks only (tree and ps on CPU as point-to-point messages)
    assert sets("tree", (1, 2)) == [(0, 1, 2, 3, 4), (1, 2)]
    # one machine: hierarchical has no across-machine step
    assert sets("hierarchical", (2, 3, 4)) == [(0, 1, 2, 3, 4), (2, 3, 4)]
