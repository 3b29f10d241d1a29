"""Which gradient syncs an iteration has besides the buckets, and the SFB compute terms (read by the builder).

A replicated group's own gradients are synced in its bucket (`tag.sim.buckets`). A parameter shared by several
groups (``GroupGraph.shared_params`` {name: group ids}) is synced once over the union of their devices, by its
first group's method, and its bytes leave that group's bucket. `group_sfb_syncs` is the one place of the per-op
sufficient-factor (SFB) path (`tag.sim.sfb`).
"""

from __future__ import annotations

from tag.sim.precision import wire_bytes
from tag.sim.sfb import dw_ms, group_sfb_factors


def group_sfb_syncs(gg, gid: int, decision, precision: str = "fp32") -> list[tuple[str, float, str]]:
    """The sufficient-factor all-gathers of group `gid` (this is the one place of the per-op SFB path,
    `tag.sim.sfb`): each op in ``decision.sfb`` adds two all-gathers, of X and of dY over the group's rows (as
    deploy runs them, before the buckets); its weight leaves the group's bucket (`tag.sim.buckets.own_sync_bytes`).
    Float factors travel at `precision` (`tag.sim.precision.wire_bytes`: 16 bits under fp16 / bf16); an embedding's
    X (its indices) keeps its size. A list of ("allgather", bytes, label)."""
    out: list[tuple[str, float, str]] = []
    if decision.replicated:
        batch = float(sum(decision.rows))
        graph = gg.graph
        for f in group_sfb_factors(gg, gid, decision):
            op = graph.ops[f.op_index]
            y = graph.tensors.get(op.outputs[0]) if op.outputs else None
            dtype, size = (y.dtype, y.itemsize) if y is not None else ("float32", 4)  # MatMul / Gemm: X, Y one type
            x_bytes = batch * f.x_bytes_per_row
            if f.kind != "gather":
                x_bytes = wire_bytes(x_bytes, dtype, size, precision)
            out += [("allgather", x_bytes, f"sfb X {op.name}"),
                    ("allgather", wire_bytes(batch * f.dy_bytes_per_row, dtype, size, precision), f"sfb dY {op.name}")]
    return out


def sync_method(decision) -> str:
    """A decision's sync as a collective name: None reads as ring (`tag.strategy.Decision`)."""
    return decision.sync or "ring"


def sfb_compute_ms(ctx, gid: int, decision) -> tuple[list[float], list[float]]:
    """Per device of ``decision.devices``: (backward ms saved by skipping the local dW, dW ms added before
    the optimizer step) of the group's SFB ops (`tag.sim.sfb.dw_ms`); cached in ``ctx.sfb``."""
    key = (gid, decision.rows, decision.sfb)
    hit = ctx.sfb.get(key)
    if hit is None:
        devs = decision.devices
        saved, added = [0.0] * len(devs), [0.0] * len(devs)
        batch = sum(decision.rows)
        prec = getattr(ctx.training, "precision", "fp32")
        for f in group_sfb_factors(ctx.gg, gid, decision) if len(devs) > 1 else []:
            for i, d in enumerate(devs):
                dt = ctx.dtypes[d]
                saved[i] += dw_ms(f, dt, decision.rows[d], ctx.cost, prec)
                added[i] += dw_ms(f, dt, batch, ctx.cost, prec)
        hit = ctx.sfb[key] = (saved, added)
    return hit


def shared_params(gg) -> dict[str, tuple[int, ...]]:
    """param name -> ids (sorted) of the groups that consume it, for parameters consumed by more than one group
    (GroupGraph.shared_params if present)."""
    sp = getattr(gg, "shared_params", None) or {}
    return {k: tuple(sorted(v)) for k, v in sp.items() if len(set(v)) > 1}


def tensor_bytes(gg, name: str) -> float:
    """Bytes of tensor `name` of the op graph (0 when unknown)."""
    t = gg.graph.tensors.get(name)
    return float(t.numel * t.itemsize) if t is not None and t.numel is not None else 0.0
