"""Sufficient-factor broadcasting (SFB) terms the simulator charges: factor bytes and the dW product.

For Y = X W (Gemm or MatMul whose second input is a parameter W of shape K x N), dW = X^T dY. A group
whose op runs SFB does not all-reduce dW; as `tag.deploy.sfb` runs it:

* backward skips the local weight-gradient product (dX = dY W^T only): a replica with r rows saves
  ``dw_ms(r)``;
* the sync all-gathers X (R x K) and dY (R x N) over the group's replicas, R = the group's global rows
  times the factor rows per batch row (MatMul on [b, s, K] inputs has s per row), two ring all-gathers
  of ``R x K x itemsize`` and ``R x N x itemsize`` bytes;
* every replica forms dW = X_all^T dY_all, ``dw_ms(R_total)``, before its optimizer step;
* W leaves the group's all-reduce (a Gemm bias stays in it).

The dW product is timed by the roofline of one matmul kernel of ``2 x R x K x N`` FLOPs and
``itemsize x (R K + R N + K N)`` bytes (`tag.cost.roofline`), on the device's efficiency parameters.
Gathered factors are transient (after the backward has freed the activations) and add no memory here.
"""

from __future__ import annotations

from dataclasses import dataclass

import weakref

import numpy as np

SFB_OP_TYPES = ("Gemm", "MatMul")  # what `tag.deploy.sfb` can run


@dataclass(frozen=True)
class SfbFactors:
    """The sufficient factors of one op: its weight, per-batch-row factor sizes, and dW shape.

    factor_rows_per_row: rows of X (and dY) per batch row; k, n: W is K x N in the product;
    x_bytes_per_row, dy_bytes_per_row: bytes of the X and dY factors per batch row;
    weight_bytes: bytes of W (what leaves the all-reduce)."""

    op_index: int
    weight: str
    k: int
    n: int
    factor_rows_per_row: float
    x_bytes_per_row: float
    dy_bytes_per_row: float
    weight_bytes: float
    itemsize: int


_USERS: dict[int, tuple] = {}


def _param_users(graph) -> dict[str, int]:
    """param name -> number of ops that read it (as an input or in Op.params), cached per graph object."""
    hit = _USERS.get(id(graph))
    if hit is not None and hit[0]() is graph:
        return hit[1]
    users: dict[str, int] = {}
    for o in graph.ops:
        for name in set(o.inputs) | set(o.params):
            users[name] = users.get(name, 0) + 1
    if len(_USERS) > 16:
        _USERS.clear()
    _USERS[id(graph)] = (weakref.ref(graph), users)
    return users


def sfb_factors(graph, op_index: int) -> SfbFactors | None:
    """The factors of op `op_index` of an OpGraph if it can run SFB as deploy runs it, else None.

    Eligible: a Gemm (without transA) or MatMul whose second input is a 2-D parameter (not produced by an
    op) used by no other op, with batched X and Y of known shapes.
    """
    op = graph.ops[op_index]
    if op.op_type not in SFB_OP_TYPES or len(op.inputs) < 2 or not op.outputs:
        return None
    if op.op_type == "Gemm" and int(op.attrs.get("transA", 0)):
        return None
    x, w, y = (graph.tensors.get(op.inputs[0]), graph.tensors.get(op.inputs[1]), graph.tensors.get(op.outputs[0]))
    if x is None or w is None or y is None or w.role != "param" or w.producer is not None:
        return None
    if w.shape is None or len(w.shape) != 2 or x.shape is None or y.shape is None or op.inputs[0] == op.inputs[1]:
        return None
    if x.batch_axis is None or y.batch_axis is None:
        return None
    if _param_users(graph).get(op.inputs[1], 0) > 1:
        return None
    transb = op.op_type == "Gemm" and int(op.attrs.get("transB", 0))
    k, n = (w.shape[1], w.shape[0]) if transb else (w.shape[0], w.shape[1])
    fb = max(graph.file_batch, 1)
    xpr, ypr = x.bytes_per_row(fb), y.bytes_per_row(fb)
    if k <= 0 or n <= 0 or xpr <= 0 or ypr <= 0:
        return None
    rows_per_row = xpr / (k * x.itemsize)
    return SfbFactors(op_index, op.inputs[1], int(k), int(n), rows_per_row, xpr, ypr,
                      float(w.numel * w.itemsize), x.itemsize)


def dw_ms(f: SfbFactors, device, batch_rows: float, cost=None, precision: str = "fp32") -> float:
    """Time of the weight-gradient product X^T dY over `batch_rows` batch rows on a device type, ms
    (one matmul kernel by the roofline; `cost.params_for(kind)` supplies efficiency parameters if it has them)."""
    from tag.cost.efficiency import bandwidth_fraction, efficiency_array, params_for
    from tag.cost.roofline import launch_ms, peak_flops_per_ms, roofline_ms

    if batch_rows <= 0:
        return 0.0
    r = batch_rows * f.factor_rows_per_row
    flops = np.array([2.0 * r * f.k * f.n])
    mem = np.array([f.itemsize * (r * f.k + r * f.n + f.k * f.n)])
    pf = getattr(cost, "params_for", None) or getattr(getattr(cost, "roofline", None), "params_for", None)
    p = pf(device.kind) if pf else params_for(device.kind)
    eff = efficiency_array(["matmul"], device.kind, flops, mem, p)
    peak = peak_flops_per_ms(device, precision, ["matmul"])
    t = roofline_ms(flops, mem, eff, device, bandwidth_fraction(mem, device.kind, p), peak)
    return float(t[0]) + launch_ms(device, p)


def group_sfb_factors(gg, gid: int, decision) -> list[SfbFactors]:
    """The factors of the ops in ``decision.sfb`` of group `gid` (names not eligible are ignored; plan
    checking and deploy reject them)."""
    if not decision.sfb:
        return []
    index = {gg.graph.ops[i].name: i for i in gg.groups[gid].op_ids}
    shared = set((getattr(gg, "shared_params", None) or {}).keys())
    out = []
    for name in decision.sfb:
        i = index.get(name)
        f = sfb_factors(gg.graph, i) if i is not None else None
        if f is not None and f.weight not in shared:
            out.append(f)
    return out
