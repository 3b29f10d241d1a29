"""The builder's task graph on a hand-built case, counted by hand.

Cluster: machine m0 with devices 0 and 1, machine m1 with device 2. Groups g0 (parameters) -> g1 (none) -> g2
(parameters), 100 bytes per row on both edges. Rows: g0 (2, 2, 0) with allreduce, g1 (4, 0, 0), g2 (0, 0, 4).

* compute: forwards g0 on 0 and 1, g1 on 0, g2 on 2 (4), the same backwards (4), one optimizer step on each
  device holding parameters (g0: 0 and 1; g2: 2): 11 tasks;
* transfers: g0 -> g1 moves rows 2..3 from device 1 to device 0 (device 0 keeps rows 0..1), g1 -> g2 moves all 4
  rows from 0 to 2; each pair carries an activation and a gradient back: 4 transfers, 200 and 400 bytes;
* syncs: only g0 is replicated: one unit over (0, 1), waiting for g0's two backwards, releasing the steps of 0, 1.
"""

from __future__ import annotations

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim.build import BuildOptions, build_task_graph
from tag.sim.context import SimContext
from tag.sim.taskgraph import DependentKind, TaskKind
from tag.strategy import Decision, Strategy, TrainingConfig

F, B, U = TaskKind.FORWARD, TaskKind.BACKWARD, TaskKind.UPDATE


def _graph(**options):
    gg = make_gg([dict(param_bytes=4e3, param_count=1000), dict(), dict(param_bytes=8e3, param_count=2000)],
                 [(0, 1, 100.0, 0.0), (1, 2, 100.0, 0.0)])
    st = Strategy((Decision((2, 2, 0), "allreduce"), Decision((4, 0, 0)), Decision((0, 0, 4))))
    ctx = SimContext(gg, make_cluster([2, 1]), FixedCost([1.0, 2.0, 3.0], [0.5, 0.0, 0.25]), TrainingConfig())
    return build_task_graph(ctx, st, BuildOptions(**options))


def _task(tg, kind, group, device):
    t = tg.tasks
    (k,) = [k for k in range(len(t)) if (t.kind[k], t.group[k], t.device[k]) == (kind, group, device)]
    return k


def test_counts_durations_and_programs():
    tg = _graph()
    t = tg.tasks
    assert len(t) == 11
    assert [t.kind.count(k) for k in (F, B, U)] == [4, 4, 3]
    # durations: fwd = per-row ms x rows, bwd twice that, step = the updates of the device's groups
    assert t.duration_ms[_task(tg, F, 0, 1)] == 2.0 and t.duration_ms[_task(tg, F, 1, 0)] == 8.0
    assert t.duration_ms[_task(tg, B, 2, 2)] == 24.0
    assert [t.duration_ms[_task(tg, U, -1, d)] for d in range(3)] == [0.5, 0.5, 0.25]
    # programs: forwards by group, backwards reversed, the step last
    assert tg.programs[0] == [_task(tg, F, 0, 0), _task(tg, F, 1, 0), _task(tg, B, 1, 0), _task(tg, B, 0, 0),
                              _task(tg, U, -1, 0)]
    assert tg.programs[1] == [_task(tg, F, 0, 1), _task(tg, B, 0, 1), _task(tg, U, -1, 1)]
    assert tg.programs[2] == [_task(tg, F, 2, 2), _task(tg, B, 2, 2), _task(tg, U, -1, 2)]
    assert tg.batch_size == 4


def test_transfers_syncs_and_inputs():
    tg = _graph()
    xs = {(x.producer, x.consumer): x for x in tg.transfers}
    assert len(xs) == 4
    act01 = xs[(_task(tg, F, 0, 1), _task(tg, F, 1, 0))]
    grad10 = xs[(_task(tg, B, 1, 0), _task(tg, B, 0, 1))]
    act12 = xs[(_task(tg, F, 1, 0), _task(tg, F, 2, 2))]
    grad21 = xs[(_task(tg, B, 2, 2), _task(tg, B, 1, 0))]
    assert [x.spec.volume_bytes for x in (act01, grad10, act12, grad21)] == [200.0, 200.0, 400.0, 400.0]
    assert (act01.spec.src, act01.spec.dst, grad10.spec.src, grad10.spec.dst) == (1, 0, 0, 1)
    assert act01.wait == (act01.producer,) and act01.deliver == (act01.consumer,)
    (u,) = tg.syncs
    assert (u.groups, u.devices, u.nbytes, u.method) == ((0,), (0, 1), 4e3, "ring")  # v1 "allreduce" reads as ring
    assert sorted(u.wait) == sorted([_task(tg, B, 0, 0), _task(tg, B, 0, 1)])
    assert u.release == [_task(tg, U, -1, 0), _task(tg, U, -1, 1)]
    assert len(u.phases) == 1 and len(u.phases[0]) == 1  # one ring coflow
    # inputs: each consumer of a transfer waits for one, the two steps for the sync, device 2's step for nothing
    expect = {_task(tg, F, 1, 0): 1, _task(tg, F, 2, 2): 1, _task(tg, B, 1, 0): 1, _task(tg, B, 0, 1): 1,
              _task(tg, U, -1, 0): 1, _task(tg, U, -1, 1): 1}
    assert tg.inputs == [expect.get(k, 0) for k in range(11)]
    assert tg.first_sync[_task(tg, B, 0, 0)] == 0 and tg.dependents[_task(tg, B, 0, 0)] is None
    assert tg.dependents[_task(tg, F, 0, 1)] == [(DependentKind.TRANSFER, 0)]
    assert tg.memory.recv == [(1, 0, 0, 1, 200.0), (2, 2, 1, 0, 400.0)]
    assert tg.memory.extra_static_bytes == [0.0, 0.0, 0.0]


def test_deploy_options_wait_for_the_whole_backward_and_rendezvous():
    tg = _graph(overlap_sync=False, blocking_sends=True)
    (u,) = tg.syncs
    # the last backward of devices 0 and 1 is g0's own backward: each listed twice
    assert sorted(u.wait) == sorted([_task(tg, B, 0, 0), _task(tg, B, 0, 1)] * 2)
    act01 = [x for x in tg.transfers if x.producer == _task(tg, F, 0, 1)][0]
    # the exchange sits at g1's forward: sender 1 has run fwd g0, receiver 0 has run fwd g0; it blocks the next
    # task of each: fwd g1 on 0 (the consumer) and bwd g0 on 1
    assert act01.wait == (_task(tg, F, 0, 1), _task(tg, F, 0, 0))
    assert act01.deliver == (_task(tg, F, 1, 0), _task(tg, B, 0, 1))
    assert tg.inputs[_task(tg, B, 0, 1)] == 2  # the gradient from g1 and this rendezvous


def test_a_strategy_of_the_wrong_shape_is_refused():
    gg = make_gg([dict(), dict()], [(0, 1, 1.0, 0.0)])
    ctx = SimContext(gg, make_cluster([2]), FixedCost([1.0, 1.0]), TrainingConfig())
    with pytest.raises(ValueError, match="1 decisions for 2 groups"):
        build_task_graph(ctx, Strategy((Decision((1, 1)),)))
    with pytest.raises(ValueError, match="group 1: row map has 3 entries for 2 devices"):
        build_task_graph(ctx, Strategy((Decision((1, 1)), Decision((1, 1, 0)))))
