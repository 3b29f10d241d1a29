"""Chain fusion (`tag.sim.fuse`): a hand-built graph whose fused form is written down by hand, and exactness of
the fused run against the unfused one over baselines and random row maps on the tiny models."""

from __future__ import annotations

import random

import pytest

from tag.sim.build import BuildOptions, build_task_graph
from tag.sim.collectives import FlowSpec
from tag.sim.context import sim_context
from tag.sim.events import run_task_graph
from tag.sim.fuse import fuse_chains, member_starts_ms, run_fused
from tag.sim.taskgraph import TaskKind
from tests.sim.helpers_sim_runs import hand_graph, random_strategy, shipped_inputs, with_buckets

CAP = 1e5  # bytes per ms of every link
F, B, U = TaskKind.FORWARD, TaskKind.BACKWARD, TaskKind.UPDATE


def test_one_bucket_fuses_forward_and_backward_into_one_task_per_device():
    # device 0: f0 (1 ms), f1 (2), b1 (4), b0 (3), u (0.5); device 1: f0 (1), f1 (1), b1 (2), b0 (2), u (0.5).
    # sync 0 (one bucket: both groups) waits for b1 and b0 of both devices, a 1e5-byte flow over link 0 (1 ms),
    # then releases both steps.
    tasks = [(0, F, 1.0), (0, F, 2.0), (0, B, 4.0), (0, B, 3.0), (0, U, 0.5),
             (1, F, 1.0), (1, F, 1.0), (1, B, 2.0), (1, B, 2.0), (1, U, 0.5)]
    flow = FlowSpec((0,), (1.0,), 1e5, 0.0, 0, 1)
    tg = hand_graph(tasks, 2, syncs=[([2, 3, 7, 8], [4, 9], [[flow]])])
    fz = fuse_chains(tg)
    g = fz.graph
    # by hand: programs [0, 4] and [5, 9]; task 0 lasts 1 + 2 + 4 + 3 = 10, task 5 lasts 6; both count towards
    # sync 0 once, which now waits for [0, 5]
    assert g.programs == [[0, 4], [5, 9]]
    assert (fz.heads, fz.lasts, fz.n_fused) == ([0, 5], [3, 8], 6)
    assert g.tasks.duration_ms[0] == 10.0 and g.tasks.duration_ms[5] == 6.0
    assert g.first_sync[0] == 0 and g.first_sync[5] == 0
    assert g.syncs[0].wait == [0, 5] and g.syncs[0].release == [4, 9]
    assert tg.syncs[0].wait == [2, 3, 7, 8] and tg.programs[0] == [0, 1, 2, 3, 4]  # the input is unchanged
    # sync ready at max(10, 6) = 10, flow 1 ms, steps start at 11 and end at 11.5
    tl = run_fused(fz, [CAP])
    assert tl.device_end_ms == pytest.approx([11.5, 11.5])
    assert member_starts_ms(fz, tg, tl.start_ms) == pytest.approx([0, 1, 3, 7, 11, 0, 1, 2, 4, 11])


def test_two_syncs_keep_the_backward_apart_and_a_transfer_ends_a_chain():
    # device 0: f0 (1), b1 (2, sync 0), b0 (3, sync 1), u; device 1: g (2, sends to device 0's b0), h (1).
    # b1 feeds sync 0 that b0 does not: b1 stays the last of [f0, b1]; b0 waits for the transfer: a head.
    # g starts a transfer: the last of its chain; h follows it alone.
    flow = FlowSpec((0,), (1.0,), 1e5, 0.0, 0, 1)
    tasks = [(0, F, 1.0), (0, B, 2.0), (0, B, 3.0), (0, U, 0.5), (1, F, 2.0), (1, F, 1.0)]
    tg = hand_graph(tasks, 2, syncs=[([1], [3], [[flow]]), ([2], [3], [[flow]])],
                transfers=[(FlowSpec((1,), (1.0,), 1e5, 0.0, 1, 0), 4, 2)])
    fz = fuse_chains(tg)
    assert fz.graph.programs == [[0, 2, 3], [4, 5]]
    assert (fz.heads, fz.lasts) == ([0], [1])
    assert fz.graph.tasks.duration_ms[0] == 3.0
    assert fz.graph.syncs[0].wait == [0] and fz.graph.syncs[1].wait == [2]
    # by hand: f0+b1 end at 3, sync 0 runs 3..4; g ends at 2, transfer 2..3; b0 runs 3..6; sync 1 runs 6..7;
    # u runs 7..7.5; device 1 ends at 3
    tl = run_fused(fz, [CAP, CAP])
    assert tl.device_end_ms == pytest.approx([7.5, 3.0])
    assert member_starts_ms(fz, tg, tl.start_ms) == pytest.approx([0, 1, 3, 7, 0, 2])


def test_a_group_without_parameters_folds_into_its_bucket_and_another_sync_cuts():
    # one device: f0 f1 f2 (1 ms each), b2 (2, sync 0), b1 (2, no parameters: no sync), b0 (2, sync 0),
    # c1 (1, no sync), c0 (1, sync 1), d (1, no sync), u (0.5, released by both syncs).
    # by hand: [f0 f1 f2 b2 b1 b0] ends at b0, the last feeder of sync 0 (b1's nothing is among b0's {0});
    # [c1 c0] feeds sync 1 only; d feeds nothing after the last feeder: its own chain; u waits: a head.
    flow = FlowSpec((0,), (1.0,), 1e5, 0.0, 0, 1)
    tasks = [(0, F, 1.0), (0, F, 1.0), (0, F, 1.0), (0, B, 2.0), (0, B, 2.0), (0, B, 2.0), (0, B, 1.0),
             (0, B, 1.0), (0, B, 1.0), (0, U, 0.5)]
    tg = hand_graph(tasks, 1, syncs=[([3, 5], [9], [[flow]]), ([7], [9], [[flow]])])
    fz = fuse_chains(tg)
    assert fz.graph.programs == [[0, 6, 8, 9]]
    assert (fz.heads, fz.lasts, fz.n_fused) == ([0, 6], [5, 7], 6)
    assert fz.member_ms == {0: (1.0, 1.0, 1.0, 2.0, 2.0, 2.0), 6: (1.0, 1.0)}
    assert [fz.graph.syncs[0].wait, fz.graph.syncs[1].wait] == [[0], [6]]
    assert (fz.graph.first_sync[0], fz.graph.first_sync[6], fz.graph.first_sync[8]) == (0, 1, -1)
    # sync 0 ready at 9, flow 9..10; sync 1 ready at 11 (after c0), flow 11..12; d 11..12; u 12..12.5
    tl = run_fused(fz, [CAP])
    assert tl.device_end_ms == pytest.approx([12.5])
    assert member_starts_ms(fz, tg, tl.start_ms) == pytest.approx([0, 1, 2, 3, 5, 7, 9, 10, 11, 12])


def test_nothing_to_fold_returns_the_graph_itself():
    tg = hand_graph([(0, F, 1.0), (1, F, 1.0)], 2)
    fz = fuse_chains(tg)
    assert fz.graph is tg and fz.n_fused == 0


def _assert_same_run(ctx, cluster, st, options: BuildOptions, where: str):
    tg = build_task_graph(ctx, st, options)
    caps = [l.bytes_per_ms for l in cluster.links]
    plain = run_task_graph(tg, caps)
    fz = fuse_chains(tg)
    fused = run_fused(fz, caps)
    # bit-identical: the fused stream adds its members' durations one by one (tag.sim.fuse)
    assert fused.device_end_ms == plain.device_end_ms, where
    assert member_starts_ms(fz, tg, fused.start_ms) == plain.start_ms, where
    assert fused.link_bytes == plain.link_bytes, where
    return fz.n_fused


CASES = [(m, t) for t in ("cpu4", "heterog8", "hap64")
         for m in ("mlp", "resnet_tiny", "transformer_tiny", "small_cnn", "gpt2_tiny", "bert_tiny")]


@pytest.mark.parametrize("model,topology", CASES)
def test_fused_run_equals_unfused_run(model, topology):
    from tag.search.baselines import BASELINES, build_baseline

    gg, cluster, cost, training, batch = shipped_inputs(model, topology)
    ctx = sim_context(gg, cluster, cost, training)
    strategies = {name: build_baseline(name, gg, cluster, cost, training) for name in BASELINES}
    strategies["dp-even 25 MiB buckets"] = with_buckets(strategies["dp-even"], 25.0)
    rng = random.Random(f"{model}|{topology}")
    for i in range(1 if cluster.n_devices > 8 else 4):
        strategies[f"random {i}"] = random_strategy(gg, cluster.n_devices, max(batch, cluster.n_devices), rng)
    folded = 0
    for name, st in strategies.items():
        for mode, options in (("async", BuildOptions()), ("deploy", BuildOptions(False, True))):
            folded += _assert_same_run(ctx, cluster, st, options, f"{model} {topology} {name} {mode}")
    assert folded > 0  # the comparison saw fused graphs


@pytest.mark.parametrize("model,topology", [("resnet_tiny", "heterog8"), ("gpt2_tiny", "cpu4")])
def test_simulate_without_trace_equals_simulate_with_trace(model, topology):
    """simulate() fuses unless a trace is asked for; both give the same result."""
    from tag.search.baselines import BASELINES, build_baseline
    from tag.sim import simulate

    gg, cluster, cost, training, _ = shipped_inputs(model, topology)
    for name in BASELINES:
        st = build_baseline(name, gg, cluster, cost, training)
        for kw in ({}, {"overlap_sync": False, "blocking_sends": True}):
            a = simulate(gg, cluster, cost, st, training, **kw)
            b = simulate(gg, cluster, cost, st, training, trace=True, **kw)
            assert (a.iteration_ms, a.fit_iteration_ms) == (b.iteration_ms, b.fit_iteration_ms), name
            assert (a.busy_ms, a.peak_memory_gb, a.link_bytes) == (b.busy_ms, b.peak_memory_gb, b.link_bytes), name
            # busy time: every task's duration added up per device, independently of both runs
            tasks = build_task_graph(sim_context(gg, cluster, cost, training), st, BuildOptions(**kw)).tasks
            want = {d.id: 0.0 for d in cluster.devices}
            for d, ms in zip(tasks.device, tasks.duration_ms):
                want[cluster.devices[d].id] += ms
            assert a.busy_ms == pytest.approx(want, rel=1e-12, abs=1e-12), name
            assert b.busy_ms == pytest.approx(want, rel=1e-12, abs=1e-12), name

