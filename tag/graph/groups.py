"""The GroupGraph: K op groups whose quotient graph is acyclic (plain data).

Groups are listed in a topological order of the quotient graph. Figures are sums over the group's ops,
per batch row plus fixed, like `OpGraph`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tag.graph.opgraph import OpGraph


@dataclass
class Group:
    id: int
    op_ids: list[int]  # indices into OpGraph.ops, in topological order
    splittable: bool
    fwd_flops_per_row: float = 0.0
    fwd_flops_fixed: float = 0.0
    bwd_flops_per_row: float = 0.0
    bwd_flops_fixed: float = 0.0
    param_count: int = 0
    param_bytes: float = 0.0
    saved_bytes_per_row: float = 0.0  # activations kept for backward
    saved_bytes_fixed: float = 0.0
    out_bytes_per_row: float = 0.0  # bytes of tensors this group sends to other groups, per row
    params: list[str] = field(default_factory=list)


@dataclass
class GroupEdge:
    """Tensors flowing from group src to group dst (src precedes dst in topological order)."""

    src: int
    dst: int
    tensors: list[str]
    bytes_per_row: float  # batched tensors: moved as row slices when row maps differ
    bytes_fixed: float  # unbatched tensors: sent whole to every consumer device lacking them


@dataclass
class GroupGraph:
    graph: OpGraph
    groups: list[Group]
    edges: list[GroupEdge]
    # tied parameters used by several groups: name -> group ids, the owner (first consumer's group) first
    shared_params: dict[str, list[int]] = field(default_factory=dict)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def group_of_op(self) -> dict[int, int]:
        """Map op index -> id of the group holding it."""
        return {i: g.id for g in self.groups for i in g.op_ids}

    def preds(self, g: int) -> list[GroupEdge]:
        return [e for e in self.edges if e.dst == g]

    def succs(self, g: int) -> list[GroupEdge]:
        return [e for e in self.edges if e.src == g]


def group_has_params(gg: GroupGraph, group_id: int) -> bool:
    """True when a group's gradients need a sync method if replicated: it owns parameters, or it uses a
    parameter shared with other groups (``GroupGraph.shared_params``)."""
    g = gg.groups[group_id]
    if g.param_bytes > 0 or g.param_count > 0 or g.params:
        return True
    return any(group_id in users for users in (getattr(gg, "shared_params", None) or {}).values())
