"""Which gradient syncs an iteration has, and the SFB compute terms (read by the builder, `tag.sim.build`).

A replicated group's gradients (its param_bytes) are synced over its devices by Decision.sync (None ->
allreduce). A parameter shared by several groups (``GroupGraph.shared_params`` {name: group ids}) is synced
once over the union of their devices, by its first group's method, and its bytes leave that group's own sync.
`group_syncs` is the one place of the per-op sufficient-factor (SFB) path (`tag.sim.sfb`).
"""

from __future__ import annotations

from tag.sim.sfb import dw_ms, group_sfb_factors


def group_syncs(gg, gid: int, decision, nbytes: float) -> list[tuple[str, float, str]]:
    """The syncs of group `gid`'s own (unshared) gradients: a list of (method, bytes, label), in order.

    This is the one place of the per-op sufficient-factor path (`tag.sim.sfb`): each op in
    ``decision.sfb`` moves its weight's bytes out of the group's sync and adds two all-gathers, of X and
    of dY over the group's rows (as deploy runs them, before the buckets).
    """
    method = decision.sync or "allreduce"
    out: list[tuple[str, float, str]] = []
    if decision.replicated:
        batch = float(sum(decision.rows))
        for f in group_sfb_factors(gg, gid, decision):
            name = gg.graph.ops[f.op_index].name
            out += [("allgather", batch * f.x_bytes_per_row, f"sfb X {name}"),
                    ("allgather", batch * f.dy_bytes_per_row, f"sfb dY {name}")]
            nbytes -= f.weight_bytes
    if nbytes > 1e-9:
        out.append((method, nbytes, f"sync g{gid}"))
    return out


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
