"""The structure tree (tag.search.structure_tree) against brute force over the same actions, and plan()'s determinism
with it.

Brute force: a recursive walk builds every strategy the structure actions reach (every path of kind, layout or
stages / micro, shard, memory, bucket) and simulates each; the tree, run until it is exhausted, must have built
exactly the distinct paths the walk found and its best must be the walk's fastest plan."""

import math
import os

from tag.modelio import ModelOptions, load_inputs
from tag.search.baselines import run_baselines
from tag.search.evaluate import Evaluator
from tag.search.planner import best_baseline, plan
from tag.search.pipeline_search import pipeline_candidates
from tag.search.structure import COMMON_LEVELS, KIND_LEVELS, PIPELINE_KEEP, make_layouts
from tag.search.structure_tree import StructureNode, StructureTree, structure_actions
from tag.sim import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MLP = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
HETEROG8 = os.path.join(ROOT, "datasets", "topologies", "heterog8.json")


def _small_case(tmp_path):
    """mlp on two machines of one V100 and one GTX 1080 Ti each, 10 Gbit/s between."""
    import json

    topo = {"version": 1, "machines": [
        {"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": 1}, {"type": "GTX1080Ti-11GB", "count": 1}],
         "nic_bandwidth_gbps": 10} for i in range(2)]}
    path = tmp_path / "four.json"
    path.write_text(json.dumps(topo))
    return load_inputs(MLP, str(path), ModelOptions())


def _layouts(tmp_path):
    """(gg, cluster, cost, training, baselines, layouts) of `_small_case`, pipelines included."""
    inp = _small_case(tmp_path)
    gg, cluster, cost, training = inp.gg, inp.cluster, inp.cost, inp.training
    baselines = run_baselines(gg, cluster, cost, training)
    pipelines = pipeline_candidates(gg, cluster, cost, training, gg.graph.batch_size, keep=PIPELINE_KEEP)
    layouts = make_layouts(gg, cluster, cost, training, gg.graph.batch_size, baselines, {}, pipelines)
    return gg, cluster, cost, training, baselines, layouts


def _enumerate(actions_for, strategy, levels, path, stages, out):
    """Every path below a node, as path -> strategy (None: the action built nothing), by plain recursion."""
    out[path] = strategy
    if not levels:
        return
    node = StructureNode(strategy, 0.0, levels, path, stages)
    for action in actions_for(node):
        s = action.build()
        if s is None:
            continue
        rest, st = levels[1:], stages
        if levels[0] == "kind":
            rest = KIND_LEVELS[action.name] + COMMON_LEVELS
        elif levels[0] == "stages":
            st = int(action.name[1:])
        _enumerate(actions_for, s, rest, path + (action.name,), st, out)


def test_exhausted_tree_builds_every_path_and_finds_the_brute_force_best(tmp_path):
    gg, cluster, cost, training, baselines, layouts = _layouts(tmp_path)
    assert "pipeline" in layouts.by_kind and "data" in layouts.by_kind

    def sim(s):
        return simulate(gg, cluster, cost, s, training)

    root = baselines["dp-even"][0]  # a start the tree must leave
    walked: dict = {}
    _enumerate(structure_actions(gg, cluster, cost, training, layouts, None, sim), root, ("kind",), (), None, walked)
    fitting = [r.iteration_ms for r in map(sim, set(walked.values())) if not r.oom]
    brute_ms = min(fitting)

    ref = baselines[best_baseline(baselines)][1].iteration_ms
    ev = Evaluator(sim, ref, {d.id: d.type.usable_memory_bytes / 1e9 for d in cluster.devices})
    tree = StructureTree(root, ev, structure_actions(gg, cluster, cost, training, layouts, None, ev.result), seed=0)
    res = tree.run(10 * len(walked))
    assert tree.root.exhausted
    assert res.nodes == len(walked)  # every path once
    assert res.playouts <= len(walked) - 1  # a playout builds one node or more (those already scored are free)
    assert ev.result(ev.best[1]).iteration_ms == brute_ms
    assert ev.result(res.best_strategy).iteration_ms == brute_ms
    assert brute_ms < baselines["dp-even"][1].iteration_ms * 0.95  # the case is not decided by its start


def test_tree_is_deterministic_and_widens_by_visits(tmp_path):
    gg, cluster, cost, training, baselines, layouts = _layouts(tmp_path)
    root = baselines[best_baseline(baselines)][0]
    runs = []
    for _ in range(2):
        ev = Evaluator(lambda s: simulate(gg, cluster, cost, s, training), 1.0,
                       {d.id: d.type.usable_memory_bytes / 1e9 for d in cluster.devices})
        tree = StructureTree(root, ev, structure_actions(gg, cluster, cost, training, layouts, None, ev.result), seed=5)
        res = tree.run(25)
        runs.append((res.best_path, res.best_strategy, [(r.level, r.actions, r.visits.tolist()) for r in res.records]))
        # progressive widening: a node visited N times has built at most 1 + floor(2 sqrt(N)) children
        stack = [tree.root]
        while stack:
            node = stack.pop()
            assert len(node.children) + len(node.dead) <= 1 + math.floor(2.0 * math.sqrt(max(node.visits - 1, 0))) \
                or node.exhausted
            stack += list(node.children.values())
    assert runs[0] == runs[1]


def test_plan_with_the_structure_tree_is_deterministic():
    inp = load_inputs(MLP, HETEROG8, ModelOptions())
    outs = []
    for _ in range(2):
        res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=30, refine_simulations=40, seed=2, sfb=False)
        outs.append((res.strategy, res.structure, res.playouts, res.simulations, res.method))
    assert outs[0] == outs[1]
    assert outs[0][2] == 30 and outs[0][4].startswith("structure+mcts+gnn") is False
    assert outs[0][1]["priors"] == "uniform" and "note" in outs[0][1]


def test_polish_priors_skip_sharded_strategies():
    """The GNN's features cannot read a shard grid's rows: the polish hands it only unsharded strategies."""
    from tag.search.structure_plan import unsharded_priors
    from tag.strategy import Decision, Strategy
    from tag.strategy.shard import Shard

    seen = []

    def gnn(strategy, group, candidates):
        seen.append(strategy)
        return [0.9, 0.1], None

    plain = Strategy((Decision((2, 2), "ring"),))
    sharded = Strategy((Decision((4, 4), shard=Shard("column", ((0, 1),), (0.5, 0.5))),))
    priors = unsharded_priors(gnn)
    assert priors(plain, 0, [plain.decisions[0], Decision((4, 0))]) == ([0.9, 0.1], None)
    p, v = priors(sharded, 0, [sharded.decisions[0], Decision((4, 0))])
    assert list(p) == [0.5, 0.5] and v is None
    p, _ = priors(plain, 0, [plain.decisions[0], sharded.decisions[0]])
    assert list(p) == [0.5, 0.5]
    assert seen == [plain] and unsharded_priors(None) is None
