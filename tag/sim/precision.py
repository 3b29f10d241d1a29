"""Bytes on the wire under a training precision (`TrainingConfig.precision`, docs/plan.md § memory and precision).

Under fp16 / bf16 autocast the activations a group computes, and their gradients, are 16-bit: a float32 tensor
that crosses between devices (an edge's activation slice forward, its gradient backward, an SFB factor X or dY)
moves `tag.strategy.memory_decisions.compute_bytes` (2) bytes per element instead of 4. Integer tensors (indices,
masks) keep their size, and so does everything under fp32 and tf32 (fp32 storage). Weight gradients, weights and
optimizer states stay fp32, so gradient syncs and ZeRO's collectives keep their fp32 bytes (`tag.sim.zero`).
"""

from __future__ import annotations

from tag.strategy.memory_decisions import compute_bytes

_AUTOCAST_DTYPES = ("float32",)  # the tensors autocast computes in 16 bits


def wire_bytes(nbytes: float, dtype: str, itemsize: int, precision: str) -> float:
    """`nbytes` of a `dtype` activation (elements of `itemsize` bytes) as it crosses devices under `precision`.

    >>> wire_bytes(400.0, "float32", 4, "bf16"), wire_bytes(400.0, "int64", 8, "bf16"), wire_bytes(400.0, "float32", 4, "tf32")
    (200.0, 400.0, 400.0)
    """
    if dtype not in _AUTOCAST_DTYPES or compute_bytes(precision) == itemsize:
        return nbytes
    return nbytes * compute_bytes(precision) / itemsize


def edge_wire_bytes(gg, edge, precision: str) -> tuple[float, float]:
    """(bytes per row, fixed bytes) of a group edge's tensors on the wire under `precision` (`wire_bytes` per
    tensor of the op graph; the edge's own figures when nothing changes size, or a tensor is not in the graph)."""
    if compute_bytes(precision) == 4:
        return edge.bytes_per_row, edge.bytes_fixed
    graph = gg.graph
    per_row, fixed = edge.bytes_per_row, edge.bytes_fixed
    for name in edge.tensors:
        t = graph.tensors.get(name)
        if t is None:
            continue
        r, f = t.bytes_per_row(graph.file_batch), t.bytes_fixed()
        per_row += wire_bytes(r, t.dtype, t.itemsize, precision) - r
        fixed += wire_bytes(f, t.dtype, t.itemsize, precision) - f
    return per_row, fixed
