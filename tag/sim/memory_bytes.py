"""The graph figures the memory model (`tag.sim.memory`) reads per op group, at the dtypes of a precision: what a
group holds from its forward to its backward, its inputs and outputs as it reads and computes them, the output
gradients waiting for their producer, the data inputs it reads and its largest weight (`GroupBytes`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from tag.cost.optimizer import FP32_BYTES
from tag.graph.autocast import FLOATS, autocast_dtypes, itemsize
from tag.graph.costs import group_held_bytes
from tag.sim.precision import edge_wire_bytes
from tag.strategy.memory_decisions import MIXED_PRECISIONS, compute_bytes


@dataclass
class GroupBytes:
    """Per group (arrays over groups) the graph figures the memory terms read, bytes, at the dtypes of a
    precision (`tag.graph.autocast`): held from forward to backward (`tag.graph.costs.group_held_bytes`), its
    in-edges' tensors as it reads them (16-bit float leaves under fp16/bf16), its out-edges' and output tensors as
    it computes them, the data inputs it reads (per row and fixed each), and its largest parameter tensor."""

    held_row: np.ndarray
    held_fixed: np.ndarray
    in_row: np.ndarray
    in_fixed: np.ndarray
    data_row: np.ndarray
    data_fixed: np.ndarray
    largest_param: np.ndarray
    out_row: np.ndarray
    out_fixed: np.ndarray
    # [g, p]: bytes (per row of p, fixed) of p's output gradients waiting for p's backward while g's runs (p < g)
    wait_row: np.ndarray | None = None
    wait_fixed: np.ndarray | None = None
    leaf_row: np.ndarray | None = None  # its 16-bit copies of float inputs computed in 32 bits (fp16/bf16)
    leaf_fixed: np.ndarray | None = None
    rerun_row: np.ndarray | None = None  # what its ops keep, outputs only where an op keeps them (a re-run forward)
    rerun_fixed: np.ndarray | None = None

    def subset(self, idx: np.ndarray) -> "GroupBytes":
        """The figures of groups `idx` only (graph indices, increasing), in that order; `wait_*` on their rows and
        columns (a group's gradients waiting for a group left out are left out)."""
        def part(name: str):
            a = getattr(self, name)
            return None if a is None else a[np.ix_(idx, idx)] if name.startswith("wait_") else a[idx]

        return GroupBytes(**{f.name: part(f.name) for f in fields(self)})


def group_bytes(gg, precision: str = "fp32", device: str = "cpu") -> GroupBytes:
    """`GroupBytes` of a GroupGraph under `precision` on `device` kind ("cpu" or "cuda": which autocast fp32 list
    applies). A GroupGraph without tensor information (hand-built) holds its groups' ``saved_bytes_per_row`` /
    ``saved_bytes_fixed`` and ``out_bytes_per_row``, has no data inputs, scales activations by `compute_bytes` / 4
    and, under fp16/bf16, holds a 16-bit copy of its weights."""
    k = gg.n_groups
    z = [np.zeros(k) for _ in range(9)]
    held_row, held_fixed, in_row, in_fixed, data_row, data_fixed, largest, out_row, out_fixed = z
    graph = gg.graph
    if graph is None or not graph.tensors:
        c = compute_bytes(precision) / FP32_BYTES
        for e in gg.edges:
            in_row[e.dst] += c * e.bytes_per_row
            in_fixed[e.dst] += c * e.bytes_fixed
        copy = c if precision in MIXED_PRECISIONS else 0.0  # the 16-bit weight copy its products keep
        for g in gg.groups:
            held_row[g.id] = c * g.saved_bytes_per_row
            held_fixed[g.id] = c * g.saved_bytes_fixed + copy * g.param_bytes
            out_row[g.id] = c * g.out_bytes_per_row
        return GroupBytes(held_row, held_fixed, in_row, in_fixed, data_row, data_fixed, largest, out_row, out_fixed)
    fb = max(graph.file_batch, 1)
    dt = autocast_dtypes(graph, precision, [g.op_ids for g in gg.groups], device)
    outs_of: dict[int, set] = {g.id: set() for g in gg.groups}
    for e in gg.edges:
        outs_of[e.src].update(e.tensors)
    gid = gg.group_of_op()
    for t in graph.outputs:
        info = graph.tensors.get(t)
        if info is not None and info.producer is not None:
            outs_of[gid[info.producer]].add(t)

    def at(name: str, dtype: str) -> tuple[float, float]:
        t = graph.tensors[name]
        scale = itemsize(dtype) / t.itemsize
        return t.bytes_per_row(fb) * scale, t.bytes_fixed() * scale

    for e in gg.edges:  # a group reads its float inputs in 16 bits under fp16/bf16, as they cross devices
        r, f = edge_wire_bytes(gg, e, precision)
        in_row[e.dst] += r
        in_fixed[e.dst] += f
    for g in gg.groups:
        held_row[g.id], held_fixed[g.id] = group_held_bytes(graph, g.op_ids, sorted(outs_of[g.id]), with_data=False,
                                                            dtypes=dt)
        for n in outs_of[g.id] & graph.tensors.keys():
            r, f = at(n, dt.produced.get(n, graph.tensors[n].dtype))
            out_row[g.id] += r
            out_fixed[g.id] += f
        data = {t for i in g.op_ids for t in graph.ops[i].inputs
                if t in graph.tensors and graph.tensors[t].role == "data"}
        data_row[g.id] = sum(graph.tensors[t].bytes_per_row(fb) for t in data)
        data_fixed[g.id] = sum(graph.tensors[t].bytes_fixed() for t in data)
        sizes = [graph.tensors[n].numel * graph.tensors[n].itemsize for n in g.params
                 if n in graph.tensors and graph.tensors[n].numel is not None]
        largest[g.id] = max(sizes, default=0.0)
    wait_row, wait_fixed = np.zeros((k, k)), np.zeros((k, k))
    leaf_row, leaf_fixed, rerun_row, rerun_fixed = np.zeros(k), np.zeros(k), np.zeros(k), np.zeros(k)
    for g in gg.groups:
        rerun_row[g.id], rerun_fixed[g.id] = group_held_bytes(graph, g.op_ids, [], with_data=False, dtypes=dt)
    last: dict[tuple[int, str], int] = {}  # (producer, float tensor) -> its last consumer group
    for e in gg.edges:
        for n in e.tensors:
            d = dt.produced.get(n, graph.tensors[n].dtype) if n in graph.tensors else ""
            if d in FLOATS:
                last[(e.src, n)] = max(last.get((e.src, n), e.dst), e.dst)
            if dt.half and d in FLOATS and d != dt.half:
                r, f = at(n, dt.half)
                leaf_row[e.dst] += r
                leaf_fixed[e.dst] += f
    for (src, n), end in last.items():
        r, f = at(n, dt.produced.get(n, graph.tensors[n].dtype))
        wait_row[src + 1: end + 1, src] += r
        wait_fixed[src + 1: end + 1, src] += f
    return GroupBytes(held_row, held_fixed, in_row, in_fixed, data_row, data_fixed, largest, out_row, out_fixed,
                      wait_row, wait_fixed, leaf_row, leaf_fixed, rerun_row, rerun_fixed)


def cached_group_bytes(ctx, precision: str) -> GroupBytes:
    """`group_bytes` of ctx.gg under `precision`, computed once per context and precision (autocast's CPU fp32
    list when every device is a CPU, else CUDA's)."""
    cache = getattr(ctx, "_memory_group_bytes", None)
    if not isinstance(cache, dict):
        cache = ctx._memory_group_bytes = {}
    if precision not in cache:
        device = "cpu" if all(getattr(t, "kind", "gpu") == "cpu" for t in ctx.dtypes) else "cuda"
        cache[precision] = group_bytes(ctx.gg, precision, device)
    return cache[precision]
