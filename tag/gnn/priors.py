"""The callable the search takes: ``priors_fn(strategy, group_id, candidates) -> (priors, value)``.

`tag.search` never imports `tag.gnn`; the caller (`tag plan`, training, benchmarks) builds the closure here and
passes it to `tag.search.planner.plan(..., priors_fn=...)`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tag.gnn.data import InstanceFeatures
from tag.gnn.graph import batch_graphs, to_torch
from tag.strategy import Decision, Strategy


def search_order(gg, cluster, cost, training, batch: int | None = None) -> list[int]:
    """The order in which the search decides groups (it does not depend on the base strategy)."""
    from tag.search.space import search_order as space_order

    return space_order(gg, cluster, cost, int(batch or gg.graph.batch_size))


UNIFORM_MIX = 0.2  # share of the uniform distribution in the priors `tag plan` uses
PRIOR_MODES = ("value", "policy", "both")
DEFAULT_MODE = "policy"
VALUE_TEMPERATURE = 0.02  # softmax temperature over predicted child log speeds (0.02 = 2% faster is e times likelier)


def value_prior(net, features: InstanceFeatures, strategy: Strategy, group_id: int,
                candidates: Sequence[Decision], temperature: float = VALUE_TEMPERATURE) -> tuple[np.ndarray, float]:
    """Priors from the value head: softmax over candidates c of V(strategy with c for group_id) / temperature.

    All children are scored in one batched forward pass. Returns (priors summing to 1, the largest child value,
    a predicted ln(time_scale_ms / iteration_ms)).
    """
    import torch

    b = batch_graphs([features.state(strategy.replace(group_id, c)) for c in candidates])
    with torch.inference_mode():
        v = net(b, with_policy=False)[1].double().numpy()
    z = np.exp((v - v.max()) / temperature)
    return z / z.sum(), float(v.max())


def policy_and_value(net, data, with_value: bool = True) -> tuple[np.ndarray, float | None]:
    """(the policy head's priors over the state's candidates [C] float64, the value head's value or None) of a
    state graph: `net` a torch `TagGNN` or a `tag.gnn.infer.NumpyTagGNN` (same outputs to float32 rounding). The
    value is None when the value head reads its own encoder (a second forward the search does not need) or
    `with_value` is False."""
    from tag.gnn.infer import NumpyTagGNN

    if isinstance(net, NumpyTagGNN):
        return net.priors(data, with_value)
    import torch

    from tag.gnn.model import policy_log_probs

    data = to_torch(data)
    with torch.inference_mode():  # no_grad's results, with less per-op bookkeeping
        h = net.embed(data)
        p = policy_log_probs(data, net.policy_logits(data, h)).exp().double().numpy()
        value = net.value_head(data, h) if with_value and net.vtrunk is None else None
    return p, None if value is None else float(value[0])


def make_priors_fn(net, features: InstanceFeatures, *, noise: float = 0.0,
                   rng: np.random.Generator | None = None, uniform_mix: float = 0.0, mode: str = "policy",
                   temperature: float = VALUE_TEMPERATURE):
    """A priors_fn evaluating `net` (a torch `TagGNN`, or for mode "policy" a `tag.gnn.infer.NumpyTagGNN`) on
    `features.state(...)` (one forward per expansion: every candidate of the group is scored in the same pass).

    mode "policy": the policy head; "value": `value_prior` (the value head on every child, one batched pass);
    "both": their average. Priors = (1 - uniform_mix) * network priors + uniform_mix * uniform, so no candidate's prior is below
    uniform_mix / C (a wrong network slows the search down but cannot hide a candidate). noise > 0 then mixes
    Dirichlet(0.3) noise in with that weight (exploration while training; `rng` required). Returns (priors over
    candidates summing to 1, predicted log speedup of the state over the first state this closure scored —
    the tree's root, i.e. the best baseline — from the value head's ln(time_scale_ms / iteration_ms)).
    """
    if noise > 0 and rng is None:
        raise ValueError("noise needs an rng (every random choice takes a seed)")
    if not 0.0 <= uniform_mix <= 1.0:
        raise ValueError("uniform_mix must be in [0, 1]")
    if mode not in PRIOR_MODES:
        raise ValueError(f"mode must be one of {PRIOR_MODES}, got {mode!r}")
    root: list[float] = []

    def priors_fn(strategy: Strategy, group_id: int, candidates: Sequence[Decision]):
        if mode == "value":
            import torch

            p, _ = value_prior(net, features, strategy, group_id, candidates, temperature)
            with torch.inference_mode():
                value = float(net(to_torch(features.state(strategy)), with_policy=False)[1][0])
        else:
            # the separate value encoder is skipped, so its critical-path features are not needed
            data = features.state(strategy, group_id, candidates, value_features=not net.config.get("value_trunk"))
            p, value = policy_and_value(net, data)
            if mode == "both":
                p = 0.5 * p / p.sum() + 0.5 * value_prior(net, features, strategy, group_id, candidates, temperature)[0]
        p = p / p.sum()
        if uniform_mix > 0:
            p = (1 - uniform_mix) * p + uniform_mix / len(p)
        if noise > 0 and len(p) > 1:
            p = (1 - noise) * p + noise * rng.dirichlet(np.full(len(p), 0.3))
        if value is None:
            return p, None
        if not root:
            root.append(value)
        return p, value - root[0]

    return priors_fn


def load_priors_fn(ckpt_path: str, gg, cluster, cost, training, batch: int | None = None,
                   uniform_mix: float = UNIFORM_MIX, mode: str = DEFAULT_MODE):
    """The priors_fn of a checkpoint for one instance (InputError for a bad or mismatched checkpoint), priors
    mixed with `uniform_mix` of the uniform distribution. Mode "policy" (the default) evaluates the network in numpy
    (`tag.gnn.infer`: no torch import); the others need the torch network (one intra-op thread: these graphs are
    small, and extra threads only contend).
    """
    from tag.gnn.checkpoint import load_checkpoint, load_inference_net

    if mode == "policy":
        net = load_inference_net(ckpt_path)
    else:
        import torch

        net, _ = load_checkpoint(ckpt_path)
        torch.set_num_threads(1)
    order = search_order(gg, cluster, cost, training, batch)
    features = InstanceFeatures(gg, cluster, cost, batch, training.optimizer, order=order, training=training)
    return make_priors_fn(net, features, uniform_mix=uniform_mix, mode=mode)
