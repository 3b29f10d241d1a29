"""Supervised targets from one-step lookahead: simulate every candidate of a decision point.

Visit counts of short searches are mostly exploration noise (most searches find nothing beyond the best
baseline). Here a decision point (a state and the group being decided) is labelled by simulating the state with
each of the group's candidates in turn:

* policy target (`targets.policy_target`) = softmax over candidates of (v_c - max_c v_c) / temperature, v_c
  the search's own value of the child (`Evaluator.value`: log speedup over the best baseline, negative for
  slower plans, below -1 for plans that run out of memory) — the one-step oracle the prior should approximate;
* value targets = `targets.speed_target` of the state and of a few of its children: ln(time_scale_ms /
  iteration_ms), which is comparable across instances (features are on the same scale) and ranks one
  instance's strategies exactly as their simulated iteration times do.

States come from trajectories down the search's own decision order, starting at the tree's root (the best
baseline): at each depth the next decision is drawn from the policy target (exploit) or uniformly (explore),
so samples cover both the paths a guided search walks and random perturbations. Every simulation goes through
the search's `Evaluator`, so repeated strategies cost nothing.
"""

from __future__ import annotations

import numpy as np
import torch

from tag.gnn.selfplay import Samples
from tag.gnn.targets import policy_target, speed_target


def lookahead_samples(inst, run, rng: np.random.Generator, *, trajectories: int = 2, temperature: float = 0.02,
                      explore: float = 0.5, children_per_state: int = 6, max_depth: int | None = None) -> Samples:
    """Policy and value samples from `trajectories` walks down the tree of `run` (a `selfplay.SearchRun`).

    At every depth of a walk: simulate all candidates of the group decided there, add the state as a policy
    sample (target `policy_target`) and a value sample, add `children_per_state` children (the best one and
    random others) as value samples, then move to a child drawn uniformly with probability `explore`, else from
    the policy target. `max_depth` caps the depth of a walk (default: every group).
    """
    space, ev, feats = run.tree.space, run.evaluator, inst.features
    order = space.order
    depth_cap = len(order) if max_depth is None else min(len(order), max_depth)
    out = Samples()
    seen_value: set = set()

    def add_value(strategy) -> None:
        if strategy in seen_value:
            return
        seen_value.add(strategy)
        d = feats.state(strategy)
        d.value = torch.tensor([speed_target(ev.result(strategy), feats.time_scale_ms)], dtype=torch.float32)
        out.value.append(d)

    for _ in range(trajectories):
        state = run.tree.base
        for depth in range(depth_cap):
            gid = order[depth]
            cands = space.candidates[gid]
            children = [state.replace(gid, c) for c in cands]
            values = np.array([ev.value(ch) for ch in children])
            target = policy_target(values, temperature)
            data = feats.state(state, gid, cands)
            data["cand"].target = torch.tensor(target, dtype=torch.float32)
            data.value = torch.tensor([speed_target(ev.result(state), feats.time_scale_ms)], dtype=torch.float32)
            out.policy.append(data)
            add_value(state)
            best = int(np.argmax(values))
            others = [i for i in range(len(cands)) if i != best]
            pick = rng.choice(len(others), size=min(children_per_state - 1, len(others)), replace=False) if others else []
            for i in [best] + [others[int(j)] for j in pick]:
                add_value(children[i])
            a = int(rng.integers(len(cands))) if rng.random() < explore else int(rng.choice(len(cands), p=target))
            state = children[a]
    return out
