"""Sufficient-factor broadcasting (SFB) terms the simulator charges: factor bytes and the dW product.

For Y = X M (Gemm, or MatMul with the parameter on the right; M = W or W^T, the latter when W reaches the
op through a Transpose as torch exports Linear, or Gemm transB) dM = X^T dY over the rows of X and dY; for
Y = M X (the parameter on the left) dM = dY^T-rows times X^T-rows, the same product over the columns of
X and Y (`sfb_form`). A group whose op runs SFB does not all-reduce dW; as `tag.deploy.sfb` runs it:

* backward skips the local weight-gradient product (dX = dY W^T only): a replica with r rows saves
  ``dw_ms(r)``;
* the sync all-gathers the factors X (R x K) and dY (R x N) over the group's replicas, R = the group's global rows
  times the factor rows per batch row (MatMul on [b, s, K] inputs has s per row), two ring all-gathers
  of ``R x K x itemsize`` and ``R x N x itemsize`` bytes;
* every replica forms dW = X_all^T dY_all, ``dw_ms(R_total)``, before its optimizer step;
* W leaves the group's all-reduce (a Gemm bias stays in it).

The dW product is timed by the roofline of one matmul kernel of ``2 x R x K x N`` FLOPs and
``itemsize x (R K + R N + K N)`` bytes (`tag.cost.roofline`), on the device's efficiency parameters.

An embedding Gather Y = W[idx] (W a K x N table) has dW = scatter-add of dY's rows at idx: its factors
are the R indices (X, R x index itemsize bytes) and dY (R x N); the dW kernel zeroes the table and adds R
rows (``R N`` FLOPs, ``itemsize x (K N + 3 R N) + R x index itemsize`` bytes, gather class).
Gathered factors are transient (after the backward has freed the activations) and add no memory here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tag.graph.sfb_form import SFB_OP_TYPES, SfbForm, sfb_form  # noqa: F401  (re-exported: the one eligibility rule)


@dataclass(frozen=True)
class SfbFactors:
    """The sufficient factors of one op: its weight, per-batch-row factor sizes, and dW shape.

    factor_rows_per_row: rows of X (and dY) per batch row; k, n: W is K x N in the product;
    x_bytes_per_row, dy_bytes_per_row: bytes of the X and dY factors per batch row (for an embedding
    Gather, X is the indices and W the K x N table);
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
    kind: str = "matmul"  # "matmul": dW = X^T dY; "gather": dW = scatter-add of dY rows at the indices X


def sfb_factors(graph, op_index: int, group_ops=None) -> SfbFactors | None:
    """The factors of op `op_index` of an OpGraph if it can run SFB as deploy runs it (`sfb_form`), else None.

    With M (K x N on the right, N x K on the left) the matrix the op multiplies by, every batch row
    contributes R = (X elements per row) / K factor rows: a [b, s, K] activation has s per row.
    """
    form = sfb_form(graph, op_index, group_ops)
    if form is None:
        return None
    op = graph.ops[op_index]
    w = graph.tensors[form.weight]
    x, y = graph.tensors[op.inputs[form.x_input]], graph.tensors[op.outputs[0]]
    if form.side == "gather":
        fb = max(graph.file_batch, 1)
        ipr, ypr = x.bytes_per_row(fb), y.bytes_per_row(fb)
        rows_per_row = ipr / x.itemsize
        if ipr <= 0 or abs(ypr / (w.shape[1] * y.itemsize) - rows_per_row) > 1e-9 * max(rows_per_row, 1.0):
            return None
        return SfbFactors(op_index, form.weight, int(w.shape[0]), int(w.shape[1]), rows_per_row, ipr, ypr,
                          float(w.numel * w.itemsize), w.itemsize, "gather")
    rows_w, cols_w = w.shape
    m_rows, m_cols = (cols_w, rows_w) if form.trans else (rows_w, cols_w)
    k, n = (m_rows, m_cols) if form.side == "right" else (m_cols, m_rows)
    fb = max(graph.file_batch, 1)
    xpr, ypr = x.bytes_per_row(fb), y.bytes_per_row(fb)
    if k <= 0 or n <= 0 or xpr <= 0 or ypr <= 0:
        return None
    rows_per_row = xpr / (k * x.itemsize)
    if abs(ypr / (n * y.itemsize) - rows_per_row) > 1e-9 * max(rows_per_row, 1.0):
        return None  # Y is not X's rows times N (a broadcast the factors do not describe)
    return SfbFactors(op_index, form.weight, int(k), int(n), rows_per_row, xpr, ypr,
                      float(w.numel * w.itemsize), x.itemsize)


def dw_ms(f: SfbFactors, device, batch_rows: float, cost=None, precision: str = "fp32") -> float:
    """Time of the weight gradient from the factors of `batch_rows` batch rows on a device type, ms: the
    product X^T dY as one matmul kernel, or for an embedding the scatter-add of R dY rows into a zeroed
    K x N table as one gather-class kernel, by the roofline (`cost.params_for(kind)` supplies efficiency
    parameters if it has them)."""
    from tag.cost.efficiency import bandwidth_fraction, efficiency_array, params_for
    from tag.cost.roofline import launch_ms, peak_flops_per_ms, roofline_ms

    if batch_rows <= 0:
        return 0.0
    r = batch_rows * f.factor_rows_per_row
    if f.kind == "gather":  # zero the K x N table, read R dY rows and R indices, read-add-write R table rows
        cls = "gather"
        flops = np.array([1.0 * r * f.n])
        mem = np.array([f.itemsize * (f.k * f.n + 3 * r * f.n) + r * f.x_bytes_per_row / f.factor_rows_per_row])
    else:
        cls = "matmul"
        flops = np.array([2.0 * r * f.k * f.n])
        mem = np.array([f.itemsize * (r * f.k + r * f.n + f.k * f.n)])
    pf = getattr(cost, "params_for", None) or getattr(getattr(cost, "roofline", None), "params_for", None)
    p = pf(device.kind) if pf else params_for(device.kind)
    eff = efficiency_array([cls], device.kind, flops, mem, p)
    peak = peak_flops_per_ms(device, precision, [cls])
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
        f = sfb_factors(gg.graph, i, gg.groups[gid].op_ids) if i is not None else None
        if f is not None and f.weight not in shared:
            out.append(f)
    return out
