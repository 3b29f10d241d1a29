"""Which ops of a strategy can send their weight gradients as sufficient factors (SFB).

An op is a candidate when its group is replicated on more than one device and the op is a product whose
weight gradient is X^T dY with per-row factors, as `tag.sim.sfb.sfb_factors` (and `tag.deploy.sfb`) accept
it (`tag.sim.sfb.sfb_form`): Gemm without transA, or MatMul, multiplying a batched operand by a 2-D
parameter W or by Transpose(W) (torch's Linear export, found in every transformer of datasets/models),
W used by no other op and not shared between groups; or an embedding Gather (axis 0 of a 2-D table
with batched integer indices), whose dW is the scatter-add of dY rows at the gathered indices. A tied
table (GPT-2's embedding read again by the LM head) is not a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.sim.sfb import SFB_OP_TYPES, SfbFactors, sfb_factors
from tag.strategy import Strategy


@dataclass(frozen=True)
class Candidate:
    """An SFB-eligible op: its group, name and factors (`tag.sim.sfb.SfbFactors`)."""

    group: int
    op_name: str
    factors: SfbFactors


def eligible_ops(gg, strategy: Strategy) -> list[Candidate]:
    """The SFB candidates of `strategy`, in group order then the group's op order.

    >>> # [c.op_name for c in eligible_ops(gg, strategy)]  ->  ["/fc1/Gemm", "/fc2/Gemm"]
    """
    shared = set((getattr(gg, "shared_params", None) or {}).keys())
    ops = gg.graph.ops
    out: list[Candidate] = []
    for g, dec in enumerate(strategy.decisions):
        if not dec.replicated:
            continue
        for i in gg.groups[g].op_ids:
            if ops[i].op_type not in SFB_OP_TYPES:
                continue
            f = sfb_factors(gg.graph, i, gg.groups[g].op_ids)
            if f is not None and f.weight not in shared:
                out.append(Candidate(g, ops[i].name, f))
    return out


def with_sfb(strategy: Strategy, chosen: list[Candidate]) -> Strategy:
    """`strategy` with each decision's ``sfb`` set to the chosen candidates of its group (others cleared)."""
    by_group: dict[int, list[str]] = {}
    for c in chosen:
        by_group.setdefault(c.group, []).append(c.op_name)
    decs = []
    for g, d in enumerate(strategy.decisions):
        names = tuple(by_group.get(g, ()))
        decs.append(d if d.sfb == names else type(d)(d.rows, d.sync, d.server, names))
    return strategy.with_decisions(decs)
