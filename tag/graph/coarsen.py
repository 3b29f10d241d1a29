"""Coarsening: OpGraph -> GroupGraph with K connected op groups and an acyclic quotient graph.

Steps (each a pure function):
1. `atoms_of`: weight generators and free ops (no FLOPs, no parameters: shape arithmetic, Reshape,
   Identity, ...) join the atom of their earliest consumer, so they never form a group of their own and
   parameters live with their user. A sequence producer and its readers share one atom (`_tie_sequences`).
2. `atom_weights`: balance weight of each atom = its share of the model's compute (forward + backward FLOPs
   at the global batch) + its share of its memory (saved activations at the global batch + parameter bytes).
3. A depth-first topological order of the atoms is cut into K contiguous segments of weight at most
   (1 + BALANCE_SLACK) x the best possible maximum, minimising the bytes crossing the cuts (coarsen_partition).
4. Segments are split into weakly connected pieces and pieces joined by an edge are merged back to K while
   the quotient graph stays acyclic; then single atoms move across boundaries where that cuts fewer bytes
   (coarsen_refine).
5. `build_group_graph`: group figures (sums over ops), the tensors exchanged, parameter ownership.
   `cross_tensors` names each exchanged tensor once, with every group that reads it (a tensor read by two
   groups lies on two edges but is one tensor: a runtime sends it once to a device hosting both).

Deterministic: no random choice anywhere; ties break by op index.

>>> # gg = coarsen(load_model("m.onnx"), k=8, n_devices=4); [g.op_ids for g in gg.groups]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tag.errors import InputError
from tag.graph.coarsen_refine import refine_boundaries
from tag.graph.coarsen_partition import (chain_order, merge_to_k, min_bottleneck, partition_1d,
                                         split_disconnected)
from tag.graph.groups import Group, GroupEdge, GroupGraph
from tag.graph.opgraph import Op, OpGraph
from tag.graph.sequences import SEQUENCE_PRODUCERS

BALANCE_SLACK = 0.15  # segments may weigh up to 15% above the best possible maximum to cut smaller tensors


def is_attachable(op: Op) -> bool:
    """True for ops that never form a group of their own: weight generators and free ops (no FLOPs and no
    parameters: shape arithmetic, Identity, Reshape, Clone, ...); they join their earliest consumer."""
    if op.is_weight_generator:
        return True
    return op.fwd_flops_per_row == 0 and op.fwd_flops_fixed == 0 and not op.params


def _op_succs(graph: OpGraph) -> list[list[int]]:
    """Consumer op indices of each op (through any output tensor), sorted, without duplicates."""
    succs: list[list[int]] = []
    for op in graph.ops:
        cons: set[int] = set()
        for t in op.outputs:
            info = graph.tensors.get(t)
            if info is not None:
                cons.update(info.consumers)
        succs.append(sorted(cons))
    return succs


def atoms_of(graph: OpGraph) -> list[int]:
    """Atom id of each op. Atoms are numbered in a topological order (by their anchor op's index).

    An attachable op joins the atom of its consumer whose anchor comes first, so for every edge x -> y,
    anchor(atom(x)) <= anchor(atom(y)): the atom graph is a DAG numbered topologically. An attachable op
    without consumers is an anchor itself.
    """
    n = len(graph.ops)
    succs = _op_succs(graph)
    anchor = list(range(n))
    for i in range(n - 1, -1, -1):
        if succs[i] and is_attachable(graph.ops[i]):
            anchor[i] = min(anchor[j] for j in succs[i])
    anchor = _tie_sequences(graph, succs, anchor)
    ids = {a: k for k, a in enumerate(sorted(set(anchor)))}
    return [ids[a] for a in anchor]


def _tie_sequences(graph: OpGraph, succs: list[list[int]], anchor: list[int]) -> list[int]:
    """Anchors with every sequence producer and its readers in one atom (deploy moves tensors, not lists).

    Each tie takes the smallest anchor of its members; attachable ops then re-take the minimum over their
    consumers, until nothing changes (anchors only fall, so this ends). The atom order must stay topological
    (anchor(x) <= anchor(y) on every edge x -> y); if a tie would break it, the untied anchors are kept.
    """
    ties = []
    for i, op in enumerate(graph.ops):
        if op.op_type in SEQUENCE_PRODUCERS:
            readers = sorted({c for t in op.outputs if t in graph.tensors for c in graph.tensors[t].consumers})
            if readers:
                ties.append([i] + readers)
    if not ties:
        return anchor
    tied, n = list(anchor), len(graph.ops)
    changed = True
    while changed:
        changed = False
        for members in ties:
            low = min(tied[m] for m in members)
            for m in members:
                if tied[m] != low:
                    tied[m], changed = low, True
        for i in range(n - 1, -1, -1):
            if succs[i] and is_attachable(graph.ops[i]):
                low = min(tied[i], min(tied[j] for j in succs[i]))
                if low != tied[i]:
                    tied[i], changed = low, True
    if any(tied[i] > tied[j] for i in range(n) for j in succs[i]):
        return anchor
    return tied


def _tensor_cost_bytes(graph: OpGraph, name: str) -> float:
    """Bytes of one tensor at the global batch: per-row bytes x batch + unbatched bytes."""
    t = graph.tensors[name]
    return t.bytes_per_row(graph.file_batch) * graph.batch_size + t.bytes_fixed()


def atom_weights(graph: OpGraph, atom: list[int], n_atoms: int) -> np.ndarray:
    """Balance weight of each atom: compute share + memory share (each share sums to 1 over the model).

    compute = (fwd + bwd FLOPs per row) x batch + fixed FLOPs; memory = saved bytes per row x batch + saved
    fixed bytes + parameter bytes. If the model has neither, every atom weighs 1.
    """
    b = graph.batch_size
    compute = np.zeros(n_atoms)
    memory = np.zeros(n_atoms)
    for i, op in enumerate(graph.ops):
        compute[atom[i]] += ((op.fwd_flops_per_row + op.bwd_flops_per_row) * b
                             + op.fwd_flops_fixed + op.bwd_flops_fixed)
        memory[atom[i]] += op.saved_bytes_per_row * b + op.saved_bytes_fixed + op.param_bytes
    w = np.zeros(n_atoms)
    for part in (compute, memory):
        total = part.sum()
        if total > 0:
            w += part / total
    return w if w.sum() > 0 else np.ones(n_atoms)


def _atom_edges(graph: OpGraph, atom: list[int]) -> dict[tuple[int, int], float]:
    """Atom edges -> bytes at the global batch of the activation tensors on them (parameters cost 0)."""
    edges: dict[tuple[int, int], float] = {}
    for i, op in enumerate(graph.ops):
        for t in op.outputs:
            info = graph.tensors.get(t)
            if info is None:
                continue
            nbytes = 0.0 if info.role == "param" else _tensor_cost_bytes(graph, t)
            for a in sorted({atom[c] for c in info.consumers} - {atom[i]}):
                edges[(atom[i], a)] = edges.get((atom[i], a), 0.0) + nbytes
    return edges


def _atom_nets(graph: OpGraph, atom: list[int]) -> list[tuple[int, tuple[int, ...], float]]:
    """One net per activation tensor crossing atoms: (producer atom, consumer atoms, bytes at the batch)."""
    nets = []
    for i, op in enumerate(graph.ops):
        for t in op.outputs:
            info = graph.tensors.get(t)
            if info is None or info.role == "param":
                continue
            dsts = tuple(sorted({atom[c] for c in info.consumers} - {atom[i]}))
            if dsts:
                nets.append((atom[i], dsts, _tensor_cost_bytes(graph, t)))
    return nets


MAX_DEVICE_GROUPS = 128  # the device rule's K at most (2 x 64 devices; `default_group_count`)


def graph_atom_count(graph: OpGraph) -> int:
    """Number of atoms: ops that can head a group (not weight generators or free ops), plus free ops
    without consumers."""
    return len(set(atoms_of(graph))) if graph.ops else 0


def default_group_count(graph: OpGraph, n_devices: int = 1) -> int:
    """Default K: min(#atoms, max(min(2 x devices, MAX_DEVICE_GROUPS), clamp(round(1.5 sqrt(#atoms)), 16, 48))).

    #atoms counts the ops that can head a group (weight generators and free ops ride with their consumer),
    so K is never below min(#atoms, 2 x devices, MAX_DEVICE_GROUPS). Two groups per device give placements room
    to spread; past MAX_DEVICE_GROUPS (64 devices) more groups cost memory and work without giving a plan room
    it uses: tag's runtime keeps every group's outputs until that group's backward and holds a 16-bit copy of
    each float input crossing into a group under fp16/bf16 (`tag.graph.costs.group_held_bytes`), so a finer cut
    holds more activation bytes on every device (`tag.sim.memory`), and a simulation's work grows with groups x
    devices.
    """
    n = graph_atom_count(graph)
    base = min(48, max(16, round(1.5 * math.sqrt(n))))
    return min(n, max(min(2 * max(n_devices, 1), MAX_DEVICE_GROUPS), base))


def coarsen(graph: OpGraph, k: int | None = None, n_devices: int = 1, refine: bool = True) -> GroupGraph:
    """Group the ops of `graph` into k connected groups with an acyclic quotient graph.

    k: groups wanted (default `default_group_count`); capped by the number of atoms, and raised only when the
    op graph has more weakly connected components than k. Groups come in a topological order, ids 0..K-1.
    refine: finish with boundary moves that cut fewer bytes (`coarsen_refine`).
    """
    if k is not None and (not isinstance(k, int) or k < 1):
        raise InputError("--groups", "K", "a positive integer", repr(k))
    if not graph.ops:
        return GroupGraph(graph=graph, groups=[], edges=[])
    atom = atoms_of(graph)
    n_atoms = max(atom) + 1
    k_eff = min(k if k is not None else default_group_count(graph, n_devices), n_atoms)
    weights = atom_weights(graph, atom, n_atoms)
    edge_bytes = _atom_edges(graph, atom)
    succ: list[list[int]] = [[] for _ in range(n_atoms)]
    for (u, v) in sorted(edge_bytes):
        succ[u].append(v)
    order = chain_order(n_atoms, succ)
    pos = np.empty(n_atoms, dtype=np.int64)
    pos[order] = np.arange(n_atoms)
    # cut_cost[p]: bytes of tensors live across a cut just before order position p
    diff = np.zeros(n_atoms + 1)
    last: dict[tuple[int, str], int] = {}
    for i, op in enumerate(graph.ops):
        for t in op.outputs:
            info = graph.tensors.get(t)
            if info is None or info.role == "param" or not info.consumers:
                continue
            p0 = int(pos[atom[i]])
            p1 = max(int(pos[atom[c]]) for c in info.consumers)
            if p1 > p0:
                nbytes = _tensor_cost_bytes(graph, t)
                diff[p0 + 1] += nbytes
                diff[p1 + 1] -= nbytes
    cut_cost = np.cumsum(diff)[:n_atoms]
    w_seq = weights[order]
    cap = min_bottleneck(w_seq, k_eff) * (1 + BALANCE_SLACK)
    starts = partition_1d(w_seq, cut_cost, k_eff, cap) + [n_atoms]
    parts = [order[starts[s]:starts[s + 1]] for s in range(k_eff)]
    parts = split_disconnected(parts, sorted(edge_bytes))
    parts = merge_to_k(parts, weights, sorted(edge_bytes), edge_bytes, k_eff)
    if refine:
        parts = refine_boundaries(parts, weights, sorted(edge_bytes), _atom_nets(graph, atom), cap)
    return build_group_graph(graph, atom, parts)


def build_group_graph(graph: OpGraph, atom: list[int], parts: list[list[int]]) -> GroupGraph:
    """The GroupGraph of a partition of atoms (parts listed in a topological order of the quotient).

    Group figures are sums over the group's ops; `out_bytes_per_row` sums the per-row bytes of its outgoing
    edges (a tensor counts once per consuming group). A parameter belongs to the group of its first consuming
    op; parameters used by several groups are listed in `shared_params`, owner first.
    """
    part_of_atom = {a: g for g, atoms in enumerate(parts) for a in atoms}
    gid = [part_of_atom[atom[i]] for i in range(len(graph.ops))]
    members: list[list[int]] = [[] for _ in parts]
    for i, g in enumerate(gid):
        members[g].append(i)
    groups: list[Group] = []
    for g, op_ids in enumerate(members):
        ops = [graph.ops[i] for i in op_ids]
        batched = [op for op in ops if op.batched]
        groups.append(Group(
            id=g, op_ids=op_ids, splittable=bool(batched) and all(op.splittable for op in batched),
            fwd_flops_per_row=sum(op.fwd_flops_per_row for op in ops),
            fwd_flops_fixed=sum(op.fwd_flops_fixed for op in ops),
            bwd_flops_per_row=sum(op.bwd_flops_per_row for op in ops),
            bwd_flops_fixed=sum(op.bwd_flops_fixed for op in ops),
            param_count=sum(op.param_count for op in ops),
            param_bytes=sum(op.param_bytes for op in ops),
            saved_bytes_per_row=sum(op.saved_bytes_per_row for op in ops),
            saved_bytes_fixed=sum(op.saved_bytes_fixed for op in ops)))
    users: dict[str, list[int]] = {}  # param -> groups of its consuming ops, in op order
    for i, op in enumerate(graph.ops):
        for p in op.params:
            lst = users.setdefault(p, [])
            if gid[i] not in lst:
                lst.append(gid[i])
    shared: dict[str, list[int]] = {}
    for p, lst in users.items():
        groups[lst[0]].params.append(p)
        if len(lst) > 1:
            shared[p] = [lst[0]] + sorted(lst[1:])
    flows: dict[tuple[int, int], GroupEdge] = {}
    for i, op in enumerate(graph.ops):
        for t in op.outputs:
            info = graph.tensors.get(t)
            if info is None or info.role == "param":
                continue
            for h in sorted({gid[c] for c in info.consumers} - {gid[i]}):
                e = flows.setdefault((gid[i], h), GroupEdge(gid[i], h, [], 0.0, 0.0))
                e.tensors.append(t)
                e.bytes_per_row += info.bytes_per_row(graph.file_batch)
                e.bytes_fixed += info.bytes_fixed()
    edges = [flows[key] for key in sorted(flows)]
    for e in edges:
        if e.src >= e.dst:
            raise AssertionError(f"group order is not topological: edge {e.src} -> {e.dst}")
        groups[e.src].out_bytes_per_row += e.bytes_per_row
    return GroupGraph(graph=graph, groups=groups, edges=edges, shared_params=shared)


@dataclass(frozen=True)
class CrossTensor:
    """One activation tensor that leaves its producer group: `name`, producer group `src`, the groups `dsts` that
    read it (ascending, src excluded), and its bytes per batch row (batched) or whole (unbatched), at the graph's
    dtype."""

    name: str
    src: int
    dsts: tuple[int, ...]
    bytes_per_row: float
    bytes_fixed: float


def cross_tensors(gg: GroupGraph) -> list[CrossTensor]:
    """Every tensor on the group graph's edges once, in edge order of first appearance (so by producer group).

    The edges list a tensor once per consuming group (`GroupEdge.tensors`); here it is one tensor with all its
    consumer groups, and its bytes are the op graph's. An edge's bytes are the sum of its tensors':
    ``e.bytes_per_row == sum(t.bytes_per_row for t if e.dst in t.dsts)``; bytes of an edge that the op graph does
    not name (a group graph built by hand, with made-up tensor names) form one tensor of that edge alone.

    >>> # hidden state h of group 3 read by groups 4 and 5: CrossTensor("h", 3, (4, 5), 4096.0, 0.0)
    """
    graph = gg.graph
    known = graph.tensors if graph is not None else {}
    found: dict[str, tuple[int, list[int], float, float]] = {}
    for e in gg.edges:
        known_row = known_fixed = 0.0
        named = [t for t in e.tensors if t in known]
        for t in named:
            info = known[t]
            src, dsts, per_row, fixed = found.setdefault(t, (e.src, [], info.bytes_per_row(graph.file_batch),
                                                             info.bytes_fixed()))
            if e.dst not in dsts:
                dsts.append(e.dst)
            known_row, known_fixed = known_row + per_row, known_fixed + fixed
        if not named or e.bytes_per_row - known_row > 0 or e.bytes_fixed - known_fixed > 0:
            # bytes the op graph does not name (a hand-built group graph): the edge's own tensor
            found[f"<edge g{e.src}->g{e.dst}>"] = (e.src, [e.dst], max(e.bytes_per_row - known_row, 0.0),
                                                   max(e.bytes_fixed - known_fixed, 0.0))
    return [CrossTensor(name, src, tuple(sorted(dsts)), per_row, fixed)
            for name, (src, dsts, per_row, fixed) in found.items()]
