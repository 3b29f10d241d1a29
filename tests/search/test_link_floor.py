"""`link_floor_ms` is a lower bound on the simulated iteration (checked by hand on one cut, and against the simulator
on every baseline and stage placement of several cases), and `pick_start` ruling stage placements out by it changes
neither the start nor the search's path (checked against the same search with the floor switched off)."""

import json
import os

import pytest

from tag.strategy import Decision, Strategy, TrainingConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NIC_GBPS = 10.0


def _case(model, topology_path, training, batch=None):
    from tag.cost import make_cost_model
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.topology import load_topology

    cluster = load_topology(topology_path)
    graph = load_model(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"), batch_size=batch,
                       n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    return gg, cluster, make_cost_model(gg, training), graph.batch_size


def _topology(path):
    return os.path.join(ROOT, "datasets", "topologies", f"{path}.json")


def test_one_cut_by_hand(tmp_path):
    """Two machines of one device each: groups before the cut on the first, the rest on the second. No group is
    replicated, so nothing syncs; the only flows are the cut's activations (device 0 -> 1) and their gradients
    (1 -> 0), each crossing both NICs in its own direction. The floor is the larger of the two over the NIC's
    10 Gb/s = 1.25e6 bytes per ms."""
    from tag.search.evaluate import link_floor_ms
    from tag.sim import simulate
    from tag.sim.context import sim_context

    topo = tmp_path / "two.json"
    topo.write_text(json.dumps({"version": 1, "name": "two", "machines": [
        {"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": 1}], "intra_bandwidth_gbps": 128,
         "nic_bandwidth_gbps": NIC_GBPS} for i in range(2)]}))
    training = TrainingConfig()
    gg, cluster, cost, batch = _case("mlp", str(topo), training, batch=64)
    cut = gg.n_groups // 2
    strat = Strategy(tuple(Decision((batch, 0) if g < cut else (0, batch)) for g in range(gg.n_groups)))
    crossing = [e for e in gg.edges if e.src < cut <= e.dst]
    assert crossing
    assert all(len(e.tensors) == 1 for e in crossing)  # one tensor per crossing edge: its bytes are the edge's
    # a tensor crosses once, however many groups past the cut read it
    tensors = {e.tensors[0]: e.bytes_per_row * batch + e.bytes_fixed for e in crossing}
    nic_bytes_per_ms = NIC_GBPS * 1e9 / 8 / 1e3
    by_hand = sum(tensors.values()) / nic_bytes_per_ms  # activations one way; gradients as large, the other way
    floor = link_floor_ms(sim_context(gg, cluster, cost, training), strat)
    assert floor == pytest.approx(by_hand, rel=1e-9)
    assert floor <= simulate(gg, cluster, cost, strat, training).iteration_ms


CASES = [("gpt2_tiny", "hap64"), ("resnet_tiny", "hap64"), ("gpt2_tiny", "tag16"), ("resnet_tiny", "cpu4"),
         ("bert_tiny", "heterog8")]


@pytest.mark.parametrize("model,topology", CASES)
def test_floor_never_above_the_simulation(model, topology):
    """Every baseline and every 1- and 2-stage placement `pick_start` tries: max(compute floor, link floor) <= the
    simulated iteration; and on the cross-machine placements of hap64 the link floor is the larger (so it is the
    part being checked there)."""
    from tag.search.baselines import BASELINES, build_baseline
    from tag.search.evaluate import compute_floor_ms, link_floor_ms
    from tag.search.starts import pipeline_starts
    from tag.sim import simulate
    from tag.sim.context import sim_context

    training = TrainingConfig()
    gg, cluster, cost, batch = _case(model, _topology(topology), training)
    ctx = sim_context(gg, cluster, cost, training)
    strategies = [build_baseline(n, gg, cluster, cost, training) for n in BASELINES]
    strategies += [s for _, s in pipeline_starts(gg, cluster, cost, training, batch, max_stages=2)]
    link_binds = 0
    for s in strategies:
        link, compute = link_floor_ms(ctx, s), compute_floor_ms(gg, cluster, cost, s)
        sim = simulate(gg, cluster, cost, s, training).iteration_ms
        assert max(link, compute) <= sim * (1 + 1e-12)
        link_binds += link > compute
    if topology == "hap64":
        assert link_binds >= 2


def test_pick_start_rules_out_without_changing_the_search(monkeypatch):
    """gpt2_tiny on tag16: a 2-stage placement is floored (its link floor, 6.6 ms, is above the best baseline's
    5.8). The same search with the floor switched off simulates them and takes the same start, the
    same evaluator count (a floored strategy counts as simulated) and the same plan; only the simulations run
    differ, by the number floored."""
    import tag.search.search_start as ss
    from tag.search.planner import plan

    training = TrainingConfig()
    gg, cluster, cost, _ = _case("gpt2_tiny", _topology("tag16"), training)
    on = ss.search_start(gg, cluster, cost, training)
    monkeypatch.setattr(ss.StartFloor, "__call__", lambda self, s: 0.0)  # every floor 0: nothing ruled out
    off = ss.search_start(gg, cluster, cost, training)
    assert on.ev.floored >= 1 and off.ev.floored == 0
    assert (on.start_name, on.base) == (off.start_name, off.base)
    assert on.ev.simulations == off.ev.simulations
    assert on.counted[0] == off.counted[0] - on.ev.floored
    plan_off = plan(gg, cluster, cost, training, playouts=0, refine_simulations=30, budget_s=None)
    monkeypatch.undo()
    plan_on = plan(gg, cluster, cost, training, playouts=0, refine_simulations=30, budget_s=None)
    assert plan_on.strategy == plan_off.strategy
    assert plan_on.result.iteration_ms == plan_off.result.iteration_ms
