"""The callable the structure tree takes: ``structure_priors_fn(strategy, level, action_names) -> (priors, value)``.

`tag.search` never imports `tag.gnn`: the caller (`tag plan`, `tag bench --ablate`, self-play) builds the closure
here and passes it to `tag.search.planner.plan(..., structure_priors_fn=...)`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tag.gnn.data import InstanceFeatures
from tag.gnn.infer import NumpyStructureNet, softmax_priors
from tag.gnn.structure_features import ACT, ActionFeaturizer
from tag.strategy import Strategy

UNIFORM_MIX = 0.2  # share of the uniform distribution in the priors `tag plan` uses (as the per-group priors)


class PointBuilder:
    """Decision points of one instance as HeteroGraphs: the strategy's state graph (`InstanceFeatures.state`, with
    the critical-path estimate) plus ``act`` nodes, one per action (`ActionFeaturizer`)."""

    def __init__(self, gg, cluster, cost, training, batch: int | None = None):
        self.features = InstanceFeatures(gg, cluster, cost, batch, training.optimizer, training=training)
        self.actions = ActionFeaturizer(cluster, [g.param_bytes for g in gg.groups])

    def point(self, strategy: Strategy, level: str, names: Sequence[str]):
        data = self.features.state(strategy)
        data[ACT].x = self.actions.featurize(level, names)
        return data


def encode_state(net, data) -> tuple:
    """(s, v_prior) of a state graph for `score_actions`: `net` a torch `StructureNet` or a
    `tag.gnn.infer.NumpyStructureNet`."""
    if isinstance(net, NumpyStructureNet):
        return net.state_embedding(data), float(np.asarray(data.v_prior).reshape(-1)[0])
    import torch

    from tag.gnn.graph import to_torch

    data = to_torch(data)
    with torch.inference_mode():  # no_grad's results, with less per-op bookkeeping
        return net.state_embedding(data), data.v_prior.reshape(-1)


def score_actions(net, state: tuple, x: np.ndarray) -> tuple[np.ndarray, float]:
    """(the policy's softmax over the actions x [A, ACTION_DIM] as float64, the value) of an encoded state."""
    if isinstance(net, NumpyStructureNet):
        logits, value = net.heads(state[0], x, state[1])
        return softmax_priors(logits), value
    import torch

    from tag.gnn.structure_model import log_softmax_by

    ab = torch.zeros(len(x), dtype=torch.long)
    with torch.inference_mode():
        logits, value = net.heads(state[0], torch.from_numpy(x), ab, state[1])
        return log_softmax_by(logits, ab).exp().double().numpy(), float(value[0])


def make_structure_priors_fn(net, points: PointBuilder, *, uniform_mix: float = UNIFORM_MIX,
                             noise: float = 0.0, rng: np.random.Generator | None = None):
    """priors_fn for `StructureTree` (`net` a torch `StructureNet` or a `tag.gnn.infer.NumpyStructureNet`): softmax of the network's action logits, mixed with `uniform_mix` of the
    uniform distribution (a wrong network reorders the tree's widening but hides no action), then, with noise > 0,
    with Dirichlet(0.3) noise of that weight (exploration while training; `rng` required). Returns (priors
    summing to 1, the value head's predicted ln(time_scale_ms / iteration_ms) below the node). A strategy the
    state features cannot read gets uniform priors and no value."""
    if noise > 0 and rng is None:
        raise ValueError("noise needs an rng (every random choice takes a seed)")

    # strategy -> (its state embedding s [1, hidden], its value prior [1]): the tree asks for several levels of the
    # same strategy (about half its calls on the datasets cases); the encoder reads the state graph only, so the
    # same s scores every level's actions (`StructureNet.heads`), as a forward of the whole point would
    encoded: dict = {}

    def priors_fn(strategy: Strategy, level: str, names: Sequence[str]):
        k = len(names)
        if k <= 1:
            return np.full(k, 1.0 / max(k, 1)), None
        state = encoded.get(strategy)
        try:
            data = points.features.state(strategy) if state is None else None
            x = points.actions.featurize(level, names)
        except (ValueError, IndexError, KeyError, ZeroDivisionError):
            return np.full(k, 1.0 / k), None
        if state is None:
            state = encoded[strategy] = encode_state(net, data)
        p, value = score_actions(net, state, x)
        p = (1 - uniform_mix) * p / p.sum() + uniform_mix / k
        if noise > 0:
            p = (1 - noise) * p + noise * rng.dirichlet(np.full(k, 0.3))
        return p, value

    return priors_fn


def load_structure_priors_fn(ckpt_path: str, gg, cluster, cost, training, batch: int | None = None,
                             uniform_mix: float = UNIFORM_MIX):
    """The structure priors_fn of a checkpoint for one instance (InputError for a bad or mismatched checkpoint),
    the network evaluated in numpy (`tag.gnn.infer`: no torch import)."""
    from tag.gnn.checkpoint import STRUCTURE_FORMAT, load_inference_net

    net = load_inference_net(ckpt_path, STRUCTURE_FORMAT)
    return make_structure_priors_fn(net, PointBuilder(gg, cluster, cost, training, batch), uniform_mix=uniform_mix)
