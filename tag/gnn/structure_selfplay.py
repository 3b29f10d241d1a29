"""Expert-iteration data for the structure network: run the structure tree on an instance, turn it into samples.

An instance is a random model (`tag.gnn.random_models`) on a random cluster (`tag.topology.random_topology`, at most
4 machines x 4 devices), both drawn from seeds in [SEED_BASE, SEED_BASE + 10^6): never the datasets/ models, the
light zoo graphs, nor the seeds `tag bench --ablate --random N` and benchmarks/structure_gnn.py use (1 .. 999).
The tree starts as `tag.search.planner.plan` starts it (`tag.search.search_start`: the baselines and the memory
pass's variants, the DP's pipelines, the tensor-shard candidates, `pick_start`), under the caller's cost model and
training settings (training: fp32, roofline costs or a profile's).

A sample is a decision point of the tree visited at least MIN_VISITS times: its state and actions
(`structure_priors.PointBuilder`), the policy target = the visit distribution over its actions, and the value
target = `targets.speed_target` of the best plan found in its subtree (ln(time_scale_ms / iteration_ms)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tag.gnn.structure_model import ACT
from tag.gnn.structure_priors import PointBuilder
from tag.gnn.targets import speed_target

SEED_BASE = 1_000_000  # training instances' model and cluster seeds: SEED_BASE + episode
MIN_VISITS = 4


@dataclass
class TreeRun:
    """One structure tree on one instance: the tree after `run`, its Evaluator and the instance's points."""

    tree: object  # StructureTree
    evaluator: object
    points: PointBuilder
    name: str


def start_tree(gg, cluster, cost, training, *, seed: int = 0, priors_fn=None, name: str = "") -> TreeRun:
    """The structure tree from `plan()`'s start on (gg, cluster, cost, training) (`tag.search.search_start`: the
    same starts, evaluator and root as `tag plan` under a fixed precision, with SFB off), ready to `run`."""
    from tag.search.search_start import search_start
    from tag.search.shard_search import group_shards
    from tag.search.structure_plan import make_structure_tree

    st = search_start(gg, cluster, cost, training)
    tree = make_structure_tree(gg, cluster, st.cost, st.training, st.ev, st.base, st.baselines, st.variants,
                               st.pipelines, group_shards(gg) if st.shard else None, seed=seed, priors_fn=priors_fn)
    return TreeRun(tree, st.ev, PointBuilder(gg, cluster, st.cost, st.training, gg.graph.batch_size), name)


def random_instance(episode: int, directory: str, training, profile: str | None = None,
                    device_type: str | None = None):
    """(gg, cluster, cost, name) of training episode `episode`: model and cluster seed SEED_BASE + episode."""
    import os

    from tag.cost import make_cost_model
    from tag.gnn.random_models import write_random_model
    from tag.gnn.train import load_cluster
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    seed = SEED_BASE + episode
    path = os.path.join(directory, f"random-model-{seed}.onnx")
    family = write_random_model(seed, path)
    cluster = load_cluster(("random", seed, device_type))
    graph = load_model(path, n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    return gg, cluster, make_cost_model(gg, training, profile=profile), f"{family}-{seed}@random-{seed}"


def _subtree_best_ms(node, ev) -> float:
    """The fastest iteration ms that fits among the strategies of `node`'s subtree (inf when none fits)."""
    r = ev.result(node.strategy)
    best = r.iteration_ms if not r.oom and math.isfinite(r.iteration_ms) else math.inf
    for child in node.children.values():
        best = min(best, _subtree_best_ms(child, ev))
    return best


def tree_samples(run: TreeRun, min_visits: int = MIN_VISITS) -> list:
    """Samples (module docstring) from every decision point of the tree with >= `min_visits` visits and >= 2
    actions, root first (breadth first)."""
    scale = run.points.features.time_scale_ms
    out, queue = [], [run.tree.root]
    while queue:
        node = queue.pop(0)
        queue += [node.children[a] for a in sorted(node.children)]
        if not node.actions or len(node.actions) < 2 or node.visits < min_visits:
            continue
        visits = [node.child_visits.get(i, 0) for i in range(len(node.actions))]
        if sum(visits) <= 0:
            continue
        try:
            data = run.points.point(node.strategy, node.levels[0], [a.name for a in node.actions])
        except (ValueError, IndexError, KeyError, ZeroDivisionError):
            continue
        best_ms = _subtree_best_ms(node, run.evaluator)
        data[ACT].target = torch.tensor([v / sum(visits) for v in visits], dtype=torch.float32)
        data.value = torch.tensor([speed_target(_Ms(best_ms), scale)], dtype=torch.float32)
        out.append(data)
    return out


@dataclass
class _Ms:
    """A result-like view of a best time for `speed_target` (inf: nothing fits)."""

    iteration_ms: float

    @property
    def oom(self) -> bool:
        return not math.isfinite(self.iteration_ms)
