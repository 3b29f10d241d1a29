"""The search with the structure tree: whole-plan structure first, per-group detail as polish (`tag.search.planner`).

After the starts (the baselines, the memory pass's variants, the pipelines and the shard candidates, simulated under
the chosen precision by `tag.search.planner.plan`):

1. the structure tree (`tag.search.structure_tree`) from the best start, `playouts` playouts over plan kind, layout,
   stage count, cuts / micro-batches / schedule, shards (shares by LP), ZeRO / recomputation and bucket cap (the
   starts are among its actions, cached; the other actions are built and simulated when the tree widens to them);
2. the memory pass on the fastest strategies found that do not fit (`fit_fastest_oom`);
3. polish: the per-group tree (`tag.search.mcts`, `playouts // POLISH_SHARE` playouts, the caller's per-group
   `priors_fn`, the GNN, applies here only, and only on strategies without shards: `unsharded_priors`) from the
   best strategy so far, and as many from the best start when that differs (a group's best decision may differ
   between the two);
4. refinement (`tag.search.refine`): when the tree moved the structure, its best with `refine_simulations`
   simulations in its own per-group space, and the OTHER_STARTS_REFINED fastest other starts (`other_starts`) with
   `refine_simulations // OTHER_REFINE_SHARE` each in that space; then the multi-start refinement `--playouts 0` runs
   (`tag.search.multistart.refine_starts`, in the root's space): the fastest start simulated (the best plan, when
   the tree kept the root's structure), then every other start, the fastest pipeline and the fastest shard
   candidate; the memory pass if the best still does not fit.

Every strategy goes through the search's Evaluator, whose best-ever is the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tag.search.budget import OTHER_REFINE_SHARE, OTHER_STARTS_REFINED, POLISH_SHARE, WallCap
from tag.search.evaluate import Evaluator
from tag.search.mcts import MCTS, MCTSResult, PriorsFn
from tag.search.memory_pass import best_fitted, with_variants
from tag.search.multistart import refine_starts
from tag.search.refine import refine as refine_pass
from tag.search.shard_search import group_shards
from tag.search.space import SearchSpace, build_space
from tag.search.structure import make_layouts
from tag.search.structure_tree import StructurePriorsFn, StructureResult, StructureTree, structure_actions
from tag.strategy import Strategy

STRUCTURE_PRIORS_NOTE = "the structure tree's priors are uniform (--no-gnn, or no structure network installed)"


@dataclass
class StructuredOutcome:
    best: Strategy
    space: SearchSpace  # the per-group space of the polish (built on the structure tree's best)
    tree: StructureResult
    polish: MCTSResult  # the per-group tree from the structure tree's best

    def report(self, structure_priors: bool) -> dict:
        """plan.json ``search.structure``."""
        return {"playouts": self.tree.playouts, "nodes": self.tree.nodes, "path": list(self.tree.best_path),
                "polish_playouts": self.polish.playouts,
                "priors": "structure network" if structure_priors else "uniform",
                **({} if structure_priors else {"note": STRUCTURE_PRIORS_NOTE})}


def structured_search(gg, cluster, cost, training, ev: Evaluator, root: Strategy, baselines: dict, variants: dict,
                      pipelines: list, *, candidates: dict, sharded: dict, playouts: int, seed: int = 0,
                      priors_fn: PriorsFn | None = None,
                      structure_priors_fn: StructurePriorsFn | None = None, refine: bool = True,
                      refine_simulations: int = 0, shard: bool = True, cap: WallCap | None = None,
                      on_playout=None, on_refine=None) -> StructuredOutcome:
    """Steps 1-3 of the module docstring from `root` (the best start). `baselines`, `variants`: name ->
    (strategy, SimResult), as `tag.search.precision.Seeds` has them; `pipelines`: the DP's PipelineCandidates
    (none: pipelines are not searched); `candidates`, `sharded`: the pipeline and shard candidates simulated, name ->
    (strategy, SimResult), whose fastest the multi-start refinement refines; `on_refine()` is called when the
    refinement begins (a progress bar's phase)."""
    from tag.search.memory_pass import fit_fastest_oom

    start_best = ev.best[1] or root  # what `--playouts 0` refines first: the fastest start simulated
    batch = gg.graph.batch_size
    shards = group_shards(gg) if shard else None
    tree = make_structure_tree(gg, cluster, cost, training, ev, root, baselines, variants, pipelines, shards,
                               seed=seed, priors_fn=structure_priors_fn)
    tres = tree.run(playouts, cap, on_playout)
    fit_fastest_oom(gg, cluster, cost, training, ev, cap=cap)
    best = ev.best[1] or root
    space = build_space(gg, cluster, cost, batch, best)
    if shard:
        space.shards = shards
    # lazy priors: the GNN (no noise here) gives the same priors whenever it is asked, so only the nodes a playout
    # walks through need a forward pass (`tag.search.mcts`)
    polish = MCTS(space, ev, best, seed=seed, priors_fn=unsharded_priors(priors_fn),
                  lazy_priors=True).run(playouts // POLISH_SHARE, cap)
    moved, start_space = best != root, space
    if moved:  # the per-group tree from the best start too: its groups' best decisions may differ
        start_space = build_space(gg, cluster, cost, batch, root)
        if shard:
            start_space.shards = shards
        MCTS(start_space, ev, root, seed=seed, priors_fn=unsharded_priors(priors_fn),
             lazy_priors=True).run(playouts // POLISH_SHARE, cap)
    best = ev.best[1] or best
    if refine:
        if on_refine:
            on_refine()
        # what `--playouts 0` refines (tag.search.multistart): the best plan, then every other start, so the basins
        # the tree did not take are still refined; when the tree moved the structure, the tree's best in its own
        # space first, then the fastest start in the root's space, as `--playouts 0` refines them
        if moved:  # (when it did not, refine_starts below refines in that space already)
            refine_pass(space, ev, best, max_simulations=refine_simulations, cap=cap)
            for start in other_starts(baselines, variants, root, ev.key_fn)[:OTHER_STARTS_REFINED]:
                # a start of another basin in the tree's best plan's space (its groups may take that plan's options)
                refine_pass(space, ev, start, max_simulations=refine_simulations // OTHER_REFINE_SHARE, cap=cap)
        refine_starts(start_space, ev, start_best if moved else best, baselines=baselines, variants=variants,
                      candidates=candidates, sharded=sharded, skip=(root,), refine_simulations=refine_simulations,
                      cap=cap)
        best = best_fitted(gg, cluster, cost, training, ev, ev.best[1] or best)
    return StructuredOutcome(best, space, tres, polish)


def other_starts(baselines: dict, variants: dict, root: Strategy, key=None) -> list[Strategy]:
    """The baselines (a baseline that does not fit: its memory variant, when it has one) other than `root`, that
    fit, fastest first (ties: the baselines' order), each once; `key(strategy)`: what makes two strategies the same
    plan (the evaluator's simulation key; None: equality), so a start that is the root in another form is left out."""
    same = key or (lambda s: s)
    starts = list(with_variants(baselines, variants).values())
    ranked = sorted((r.iteration_ms, i, s) for i, (s, r) in enumerate(starts)
                    if not r.oom and r.iteration_ms < float("inf"))
    seen, out = {same(root)}, []
    for _, _, s in ranked:
        if same(s) not in seen:
            seen.add(same(s))
            out.append(s)
    return out


def make_structure_tree(gg, cluster, cost, training, ev: Evaluator, root: Strategy, baselines: dict, variants: dict,
                        pipelines: list, shards: dict | None, *, seed: int = 0,
                        priors_fn: StructurePriorsFn | None = None) -> StructureTree:
    """The structure tree of step 1 from `root`, its actions built over the layouts of the starts and `shards`, the
    groups' shard options (`group_shards`; None: shards are not searched)."""
    layouts = make_layouts(gg, cluster, cost, training, gg.graph.batch_size, baselines, variants, pipelines)
    return StructureTree(root, ev, structure_actions(gg, cluster, cost, training, layouts, shards, ev.result),
                         seed=seed, priors_fn=priors_fn)


def unsharded_priors(priors_fn: PriorsFn | None) -> PriorsFn | None:
    """`priors_fn` on strategies without a tensor shard; uniform priors where a decision is sharded (the GNN's
    state features read row maps over the batch, which a shard grid's rows are not)."""
    if priors_fn is None:
        return None

    def priors(strategy: Strategy, group: int, candidates):
        if any(d.shard is not None for d in strategy.decisions) or any(c.shard is not None for c in candidates):
            return np.full(len(candidates), 1.0 / max(1, len(candidates))), None
        return priors_fn(strategy, group, candidates)
    return priors
