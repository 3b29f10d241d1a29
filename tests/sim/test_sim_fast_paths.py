"""The event loop's shortcuts against the plain computations they replace: a flow's alone rate kept on the flow
(recomputed under other capacities), and the fused graph's sync units copied field by field as
`dataclasses.replace` copies them."""

from __future__ import annotations

import dataclasses
import os

from tag.sim.network import Flow, _alone, max_min_rates

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_alone_rate_follows_the_capacities_it_is_asked_under():
    f = Flow((0, 2), (1.0, 2.0), 100.0, 0.0)
    caps_a, caps_b = [10.0, 99.0, 30.0], [10.0, 99.0, 8.0]
    _alone(f, caps_a)
    assert f.rate == min(10.0 / 1.0, 30.0 / 2.0) == 10.0
    _alone(f, caps_b)  # another capacity list: computed again, not the kept rate
    assert f.rate == min(10.0 / 1.0, 8.0 / 2.0) == 4.0
    _alone(f, caps_b)
    assert f.rate == 4.0
    # flows that share no link each get their narrowest link, by hand
    g, h = Flow((1,), (3.0,), 1.0, 0.0), Flow((3,), (0.5,), 1.0, 0.0)
    max_min_rates([g, h], [1.0, 90.0, 1.0, 4.0])
    assert (g.rate, h.rate) == (30.0, 8.0)
    # a shared link: the progressive filling, by hand (two flows on link 0 of capacity 10: 5 each)
    p, q = Flow((0,), (1.0,), 1.0, 0.0), Flow((0, 1), (1.0, 1.0), 1.0, 0.0)
    max_min_rates([p, q], [10.0, 100.0])
    assert (p.rate, q.rate) == (5.0, 5.0)


def test_fused_sync_units_copy_every_field_but_wait():
    from tag.cost import make_cost_model
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.search.baselines import BASELINES, build_baseline
    from tag.sim.build import BuildOptions, build_task_graph
    from tag.sim.context import sim_context
    from tag.sim.fuse import fuse_chains
    from tag.strategy import TrainingConfig
    from tag.topology import load_topology

    cluster = load_topology(os.path.join(ROOT, "datasets", "topologies", "heterog8.json"))
    graph = load_model(os.path.join(ROOT, "datasets", "models", "bert_tiny.onnx"), n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    training = TrainingConfig(optimizer="adam")
    cost = make_cost_model(gg, training)
    ctx = sim_context(gg, cluster, cost, training)
    kinds = set()
    for name in BASELINES:
        tg = build_task_graph(ctx, build_baseline(name, gg, cluster, cost, training), BuildOptions())
        fz = fuse_chains(tg)
        if fz.n_fused == 0:
            continue
        head_of = dict(zip(fz.lasts, fz.heads))
        last_of_chain = set(fz.lasts)
        members = {k for h, l in zip(fz.heads, fz.lasts) for prog in tg.programs if h in prog
                   for k in prog[prog.index(h):prog.index(l) + 1]}
        for u, v in zip(tg.syncs, fz.graph.syncs):
            # by hand: a listing of a chain's last task becomes its head, other members' listings drop
            want = [head_of.get(k, k) for k in u.wait if k not in members or k in last_of_chain]
            assert v.wait == want
            assert v == dataclasses.replace(u, wait=want)
            assert (v is u) == (list(u.wait) == want)  # unchanged units are kept, the others copied
            kinds.add(v is u)
    assert kinds == {True, False}  # both seen
