"""A strategy's step as `tag deploy` runs it, for the verbs that print it (`tag deploy` beside its measured step,
`tag simulate` beside its iteration): one call of `tag.cost.contention.deployed_step_ms` with what the inputs say
about the run: the profile's contention terms (none: the plain cost model), the barrier `tag profile links`
measured into the topology (none: 0 ms), and whether the runtime overlaps bucket sums with the backward (not in a
pipeline, nor when a training-mode BatchNormalization is split over devices)."""

from __future__ import annotations

import json


def as_deployed_step(inp, strategy, n_ranks: int, topology_path: str, speed: float = 1.0):
    """(`DeployedStep`, missing): `strategy` on `inp` (a loaded model, cluster and cost model) as deploy runs it on
    `n_ranks` ranks, every compute time x `speed`; missing names the terms the inputs lack ("contention terms",
    "measured barrier")."""
    from tag.cost.contention import deployed_step_ms
    from tag.graph.op_families import is_training_batchnorm
    from tag.profile.links import barrier_ms
    from tag.sim import simulate

    with open(topology_path) as f:
        topo = json.load(f)
    fence = barrier_ms(topo) if isinstance(topo, dict) else None
    split_bn = any(len(dec.devices) > 1 and any(is_training_batchnorm(inp.graph.ops[i]) for i in g.op_ids)
                   for dec, g in zip(strategy.decisions, inp.gg.groups))
    terms = getattr(inp.cost, "contention", None)
    cost = inp.cost if speed == 1.0 else inp.cost.scaled(speed)
    step = deployed_step_ms(simulate, inp.gg, inp.cluster, cost, strategy, inp.training, terms=terms,
                            n_ranks=n_ranks, fence_ms=fence or 0.0,
                            overlap_sync=strategy.pipeline is None and not split_bn)
    missing = [w for w, v in (("contention terms", terms), ("measured barrier", fence)) if v is None]
    return step, missing
