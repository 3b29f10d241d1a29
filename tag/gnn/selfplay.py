"""Expert-iteration data: load an instance, run the tree search with the current network, turn it into samples.

A policy sample is a search state at a decision point the search visited often (``MCTSResult.records``), with
the visit distribution over that group's candidates as target. A value sample is any strategy the search
simulated (the Evaluator cache, which also holds every baseline), with target `targets.speed_target`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from tag.gnn.data import InstanceFeatures
from tag.gnn.targets import speed_target

@dataclass
class Instance:
    """One training or evaluation case: a coarsened model on a cluster with a cost model."""

    name: str
    gg: object
    cluster: object
    cost: object
    training: object
    batch: int
    features: InstanceFeatures


def load_instance(model_path: str, cluster, training, *, profile: str | None = None, groups: int | None = None,
                  graph_cache: dict | None = None) -> Instance:
    """Load (or reuse from `graph_cache`) the model at the cluster's default batch, coarsen it, build features."""
    import os

    from tag.cost import make_cost_model
    from tag.gnn.priors import search_order
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    key = (str(model_path), cluster.n_devices, groups)
    if graph_cache is not None and key in graph_cache:
        gg = graph_cache[key]
    else:
        graph = load_model(model_path, n_devices=cluster.n_devices)
        gg = coarsen(graph, k=groups, n_devices=cluster.n_devices)
        if graph_cache is not None:
            graph_cache[key] = gg
    cost = make_cost_model(gg, training, profile=profile)
    batch = gg.graph.batch_size
    order = search_order(gg, cluster, cost, training, batch)
    feats = InstanceFeatures(gg, cluster, cost, batch, training.optimizer, order=order, training=training)
    name = f"{os.path.splitext(os.path.basename(str(model_path)))[0]}@{cluster.name}"
    return Instance(name, gg, cluster, cost, training, batch, feats)


@dataclass
class SearchRun:
    """One tree search: the tree, its result once run, the Evaluator (cache, reference) and the baselines."""

    tree: object  # MCTS
    result: object  # MCTSResult, None until run
    evaluator: object
    baselines: dict
    base_name: str


def start_search(inst: Instance, priors_fn=None, seed: int = 0) -> SearchRun | None:
    """Baselines, then an MCTS tree rooted at the best baseline, ready to run (as `plan(refine=False, sfb=False)`).

    Returns None when every baseline runs out of memory (no reference time to learn speedups from).
    `SearchRun.tree.playout()` runs one playout; `SearchRun.evaluator.best` is the best strategy so far.
    """
    from tag.search.baselines import run_baselines
    from tag.search.evaluate import Evaluator
    from tag.search.mcts import MCTS
    from tag.search.planner import best_baseline
    from tag.search.space import build_space
    from tag.sim import simulate

    baselines = run_baselines(inst.gg, inst.cluster, inst.cost, inst.training)
    name = best_baseline(baselines)
    if name is None:
        return None
    usable_gb = {d.id: d.type.usable_memory_bytes / 1e9 for d in inst.cluster.devices}
    ev = Evaluator(lambda s: simulate(inst.gg, inst.cluster, inst.cost, s, inst.training),
                   baselines[name][1].iteration_ms, usable_gb)
    for s, _ in baselines.values():  # seed the cache and the best-ever, as plan() does
        ev.value(s)
    base = baselines[name][0]
    space = build_space(inst.gg, inst.cluster, inst.cost, inst.batch, base)
    tree = MCTS(space, ev, base, seed=seed, priors_fn=priors_fn)
    return SearchRun(tree, None, ev, baselines, name)


def run_search(inst: Instance, playouts: int, priors_fn=None, seed: int = 0) -> SearchRun | None:
    """`start_search` then `playouts` playouts; `SearchRun.result` holds the MCTSResult (visit records)."""
    run = start_search(inst, priors_fn, seed)
    if run is not None:
        run.result = run.tree.run(playouts)
    return run


@dataclass
class Samples:
    policy: list = field(default_factory=list)  # HeteroGraph with cand.target
    value: list = field(default_factory=list)  # HeteroGraph with .value


def episode_samples(inst: Instance, run: SearchRun, rng: np.random.Generator, max_value: int = 48) -> Samples:
    """Policy samples from the visit records, value samples from up to `max_value` simulated strategies."""
    out = Samples()
    scale = inst.features.time_scale_ms
    for rec in run.result.records:
        data = inst.features.state(rec.strategy, rec.group, rec.candidates)
        data["cand"].target = torch.tensor(rec.visits / rec.visits.sum(), dtype=torch.float32)
        data.value = torch.tensor([speed_target(run.evaluator.result(rec.strategy), scale)], dtype=torch.float32)
        out.policy.append(data)
    items = list(run.evaluator.cache.items())
    pick = rng.choice(len(items), size=min(max_value, len(items)), replace=False) if items else []
    for i in sorted(int(i) for i in pick):
        strategy, res = items[i]
        data = inst.features.state(strategy)
        data.value = torch.tensor([speed_target(res, scale)], dtype=torch.float32)
        out.value.append(data)
    return out
