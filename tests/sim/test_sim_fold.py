"""Twin folding (`tag.sim.fold`): the classes of a hand-built graph and its run worked out by hand, and the folded
run against the plain event loop on the unfolded, unfused graph (a second method) over baselines, buckets, ZeRO,
recomputation, partial replica sets and random row maps on the shipped models and clusters. Twins read off the
strategy are checked against the whole graph's, and the graph built folded against the whole graph folded after."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tag.sim.build import BuildOptions, build_task_graph
from tag.sim.collectives import FlowSpec
from tag.sim.context import sim_context
from tag.sim.events import run_task_graph
from tag.sim.build_parts import edge_flows
from tag.sim.fold import fold_twins, fold_with, strategy_twins, twin_representatives, unfold_end_ms
from tag.sim.fuse import fuse_chains, run_fused
from tag.sim.taskgraph import TaskKind
from tag.sim.tensor_sends import transfer_plan
from tests.sim.helpers_sim_runs import hand_graph, random_strategy, shipped_inputs, with_buckets

CAP = 1e5  # bytes per ms of every link
F, B, U = TaskKind.FORWARD, TaskKind.BACKWARD, TaskKind.UPDATE


def _four_devices():
    """d0, d1: f 1 ms, b 2 ms, u 0.5 ms; d2: b takes 3 ms; d3 as d0 but its b feeds sync 1. Sync 0 waits for the
    b of d0-d2 and releases their u; sync 1 the same for d3. Each sync is one 1e5-byte flow on link 0 (1 ms)."""
    tasks = [(0, F, 1.0), (0, B, 2.0), (0, U, 0.5), (1, F, 1.0), (1, B, 2.0), (1, U, 0.5),
             (2, F, 1.0), (2, B, 3.0), (2, U, 0.5), (3, F, 1.0), (3, B, 2.0), (3, U, 0.5)]
    flow = FlowSpec((0,), (1.0,), 1e5, 0.0, 0, 1)
    return hand_graph(tasks, 4, syncs=[([1, 4, 7], [2, 5, 8], [[flow]]), ([10], [11], [[flow]])])


def test_twins_of_a_hand_built_graph_and_its_run():
    tg = _four_devices()
    # d0 and d1 are twins (d1, the last, represents both); d2 differs in a duration, d3 in the sync it feeds
    assert twin_representatives(tg) == [1, 1, 2, 3]
    folded, rep = fold_twins(tg, min_devices=1)
    assert rep == [1, 1, 2, 3]
    assert folded.programs == [[], [0, 1, 2], [3, 4, 5], [6, 7, 8]]  # d1-d3's tasks, renumbered
    assert [u.wait for u in folded.syncs] == [[1, 4], [7]] and [u.release for u in folded.syncs] == [[2, 5], [8]]
    # by hand: the b of d0 / d1 end at 3, d2's at 4 and d3's at 3. Both syncs share one communicator (every device):
    # sync 1 is ready at 3 and holds link 0 until 4; sync 0 is ready at 4 and ends at 5. The steps end at
    # 5.5 (d0-d2) and 4.5 (d3).
    tl = run_fused(fuse_chains(folded), [CAP])
    assert unfold_end_ms(tl.device_end_ms, rep) == [5.5, 5.5, 5.5, 4.5]
    assert run_task_graph(tg, [CAP]).device_end_ms == [5.5, 5.5, 5.5, 4.5]


def test_devices_released_by_different_syncs_are_not_twins():
    # d0 and d1: f 1 ms, b 2 ms, u 0.5 ms, and both b feed syncs 0 and 1; sync 0 (1 ms) releases d0's u, sync 1
    # (2e5 bytes: 2 ms) releases d1's. Both are ready at 3 on one communicator: sync 0 runs 3-4, sync 1 4-6, so the
    # steps end at 4.5 and 6.5 and the devices are not twins
    tasks = [(0, F, 1.0), (0, B, 2.0), (0, U, 0.5), (1, F, 1.0), (1, B, 2.0), (1, U, 0.5)]
    short, long = FlowSpec((0,), (1.0,), 1e5, 0.0, 0, 1), FlowSpec((0,), (1.0,), 2e5, 0.0, 0, 1)
    tg = hand_graph(tasks, 2, syncs=[([1, 4], [2], [[short]]), ([1, 4], [5], [[long]])])
    assert twin_representatives(tg) is None
    assert run_task_graph(tg, [CAP]).device_end_ms == [4.5, 6.5]


def test_a_transfer_keeps_its_devices_apart_and_small_graphs_are_not_folded():
    tasks = [(0, F, 1.0), (0, B, 2.0), (1, F, 1.0), (1, B, 2.0), (2, F, 1.0), (2, B, 2.0)]
    flow = FlowSpec((0,), (1.0,), 1e5, 0.0, 0, 1)
    # d1's forward sends to d2's backward: d1 and d2 are each their own class, so d0, whose program is d1's, has
    # no twin
    tg = hand_graph(tasks, 3, transfers=[(flow, 2, 5)])
    assert twin_representatives(tg) is None
    assert fold_twins(_four_devices()) is None  # 4 devices: below MIN_DEVICES


def _strategies(gg, cluster, cost, training, batch, rng):
    """Name -> strategy; on more than 64 devices dp-even and its variants only (Baechi's placers, dp-proportional's
    row moves and random row maps take a minute there)."""
    from tag.search.baselines import BASELINES, build_baseline
    from tag.strategy import Decision, Strategy

    big = cluster.n_devices > 64
    names = ("dp-even",) if big else BASELINES
    out = {name: build_baseline(name, gg, cluster, cost, training) for name in names}
    dp = out["dp-even"]
    prop = out.get("dp-proportional", dp)
    out["buckets 25 MiB"] = with_buckets(dp, 25.0)
    for z in (1, 2, 3):
        out[f"zero {z}"] = prop.with_decisions(replace(d, zero=z) if d.replicated else d for d in prop.decisions)
    out["recompute some"] = dp.with_decisions(replace(d, recompute=rng.random() < 0.5) for d in dp.decisions)
    n = cluster.n_devices
    half = sorted(rng.sample(range(n), n // 2))  # data parallel over half the devices, the others idle
    rows = [0] * n
    for i in range(batch):
        rows[half[i % len(half)]] += 1
    out["half the devices"] = Strategy(tuple(Decision(tuple(rows), "ring") for _ in range(gg.n_groups)))
    if not big:
        out["random"] = random_strategy(gg, n, max(batch, n), rng)
    return out


CASES = [("mlp", "hap64"), ("bert_tiny", "hap64"), ("resnet_tiny", "hap64"), ("gpt2_tiny", "tag16"),
         ("small_cnn", "heterog8"), ("transformer_tiny", "cpu4"), ("mlp", "mixed1024")]


@pytest.mark.parametrize("model,topology", CASES)
def test_folded_run_equals_the_plain_run(model, topology):
    from tag.sim import simulate

    gg, cluster, cost, training, batch = shipped_inputs(model, topology)
    ctx = sim_context(gg, cluster, cost, training)
    caps = [l.bytes_per_ms for l in cluster.links]
    rng = random.Random(f"{model}|{topology}")
    folds = pre = 0
    for name, st in _strategies(gg, cluster, cost, training, max(batch, cluster.n_devices), rng).items():
        for mode, options in (("async", BuildOptions()), ("deploy", BuildOptions(False, True))):
            where = f"{model} {topology} {name} {mode}"
            tg = build_task_graph(ctx, st, options)
            pre += _check_built_folded(ctx, st, options, tg, where)
            folded = fold_twins(tg, min_devices=1)
            if folded is None:
                continue
            plain = run_task_graph(tg, caps)
            tl = run_fused(fuse_chains(folded[0]), caps)
            assert unfold_end_ms(tl.device_end_ms, folded[1]) == plain.device_end_ms, where
            assert tl.link_bytes == plain.link_bytes, where
            folds += len(set(folded[1])) < cluster.n_devices
        if cluster.n_devices >= 16:  # simulate() folds (no trace) or not (trace): the same result
            a = simulate(gg, cluster, cost, st, training)
            b = simulate(gg, cluster, cost, st, training, trace=True)
            assert (a.iteration_ms, a.fit_iteration_ms, a.link_bytes, a.busy_ms) == (
                b.iteration_ms, b.fit_iteration_ms, b.link_bytes, b.busy_ms), where
    assert folds >= 4  # the comparisons saw folded graphs
    assert pre >= 4  # and graphs built folded


def _check_built_folded(ctx, st, options, tg, where: str) -> int:
    """1 when the strategy has twins (`strategy_twins`) after checking that (a) each of its classes lies in one class
    of the whole graph `tg` (`twin_representatives`, from the graph alone) and (b) the graph built with them is the
    whole graph folded by them (`fold_with`), field by field; else 0."""
    plan = transfer_plan(ctx, st.decisions, edge_flows)
    rep = strategy_twins(ctx, st, plan, min_devices=1)
    if rep is None:
        return 0
    whole = twin_representatives(tg)
    assert whole is not None, where
    assert all(whole[d] == whole[r] for d, r in enumerate(rep)), where
    assert build_task_graph(ctx, st, options, rep=rep, plan=plan) == fold_with(tg, rep), where
    return 1
