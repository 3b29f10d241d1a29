"""Per-op costs: op class, forward and backward FLOPs, memory traffic, output and saved bytes.

Rules (FLOP = 2 x MAC for products; figures for the whole op at the file's batch, then split per row):

- Conv: 2 * out_elems * (C_in / group) * prod(kernel) (+ out_elems for the bias).
- ConvTranspose: 2 * in_elems * (C_out / group) * prod(kernel) (+ out_elems for the bias).
- Gemm: 2 * M * N * K (+ M * N for C). MatMul (batched, attention): 2 * out_elems * K.
- LSTM / GRU / RNN (class "rnn"): D * T * B * (2 * G * H * (I + H) + 4 * G * H) for G gate blocks (4 / 3 / 1), D
  directions, T steps, B rows, input size I, hidden size H.
- Einsum: 2 * prod(size of every index letter) for two or more operands ((n - 1) x for n operands);
  one operand: prod(size of every letter) additions.
- MaxPool/AveragePool/LpPool: out_elems * prod(kernel); global pools: in_elems.
- BatchNormalization (inference affine) 2, Layer/Instance/Group normalisation 5, Softmax family 5 FLOP
  per element; LRN (2 * size + 3) per element.
- Elementwise: `ELEMENT_FLOPS` per output element (1 unless listed); variadic Sum/Max/Min/Mean (n - 1).
- Reductions: in_elems (2 x for sum of squares / L2 / log-sum-exp). CumSum, TopK: in_elems.
- Resize: out_elems x (1 nearest, 2 * 2^r linear, 2 * 4^r cubic; r = rank - 2).
- Gather family and data movement: 0 FLOP. An op type with no rule: 0 FLOP, costed as memory-bound by its
  traffic, and named once in the graph's warnings.
- Sequences: SplitToSequence + SequenceAt is a Split: the SplitToSequence moves nothing (a sequence holds
  views), each SequenceAt reads and writes its element, so the pair moves the bytes of one Split.
- Shape plumbing traced from literals (`is_shape_plumbing`: positions, causal masks, shape vectors) and
  unbatched integer ops with no rule cost nothing (class "shape"); CastLike reads only the dtype of its
  second input.

Backward FLOPs: products (conv, matmul, rnn classes) 2 x forward (input gradient + weight gradient; the input
gradient is kept even when that input is data or needs no gradient); every other op 1 x forward.
Memory traffic (`mem_bytes`): bytes of inputs read + outputs written; parameters and constants are read
whole (fixed) except a Gather's table, of which only the gathered rows are read; views (Reshape, Squeeze,
Identity, inference Dropout, ...) move nothing. Saved bytes: activations (not parameters) the backward
needs, by `SAVES_OUTPUT` / `SAVES_NOTHING` / inputs otherwise.
"""

from __future__ import annotations

import numpy as np

from tag.graph.batch_axis import expand_einsum
from tag.graph.op_families import BROADCAST_OPS, REDUCE_OPS, TYPE_ONLY_INPUTS
from tag.graph.opgraph import Op, TensorInfo

CLASS_OPS = {
    "conv": "Conv ConvTranspose ConvInteger QLinearConv DeformConv",
    "matmul": "MatMul Gemm Einsum MatMulInteger QLinearMatMul FusedMatMul",
    "rnn": "LSTM GRU RNN",
    "norm": """BatchNormalization LayerNormalization InstanceNormalization GroupNormalization LRN LpNormalization
               SkipLayerNormalization SimplifiedLayerNormalization MeanVarianceNormalization RMSNormalization""",
    "pool": "MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool GlobalLpPool MaxRoiPool RoiAlign MaxUnpool",
    "softmax": "Softmax LogSoftmax Hardmax",
    "reduce": " ".join(sorted(REDUCE_OPS)) + " CumSum TopK",
    "gather": "Gather GatherElements GatherND ScatterND ScatterElements Scatter OneHot",
    "data_movement": """Reshape Flatten Squeeze Unsqueeze Transpose Concat Split Slice Expand Tile Pad Identity Dropout
                        Cast CastLike DepthToSpace SpaceToDepth Resize Upsample ReverseSequence Trilu
                        SplitToSequence SequenceAt SequenceConstruct SequenceInsert SequenceErase ConcatFromSequence""",
    "shape": "Shape Size Constant ConstantOfShape Range EyeLike SequenceLength SequenceEmpty",
}
OP_CLASS = {t: c for c, ts in CLASS_OPS.items() for t in ts.split()}
for _t in BROADCAST_OPS:
    OP_CLASS.setdefault(_t, "elementwise")
OP_CLASS["Where"] = "elementwise"

VIEW_OPS = frozenset("""Reshape Flatten Squeeze Unsqueeze Identity Dropout Shape Size Constant
    SplitToSequence SequenceConstruct""".split())  # a sequence holds references to its elements
ELEMENT_FLOPS = {"BatchNormalization": 2, "LayerNormalization": 5, "InstanceNormalization": 5,
                 "GroupNormalization": 5, "SkipLayerNormalization": 6, "SimplifiedLayerNormalization": 4,
                 "RMSNormalization": 4, "MeanVarianceNormalization": 5, "LpNormalization": 3,
                 "Softmax": 5, "LogSoftmax": 5, "Hardmax": 2,
                 "Sigmoid": 4, "Tanh": 4, "Erf": 4, "Gelu": 8, "FastGelu": 8, "BiasGelu": 9, "QuickGelu": 5,
                 "Softplus": 3, "Mish": 6, "Elu": 3, "Selu": 4, "Celu": 4, "HardSigmoid": 3, "HardSwish": 4,
                 "Pow": 2, "Clip": 2, "LeakyRelu": 2, "PRelu": 2,
                 "Dropout": 0, "Identity": 0, "Cast": 0, "CastLike": 0, "Expand": 0}
SAVES_OUTPUT = frozenset("Relu Sigmoid Tanh Exp Sqrt Softmax LogSoftmax Reciprocal Elu Selu Celu".split())
SAVES_NOTHING = frozenset("""Add Sub Sum Neg Identity Dropout Cast CastLike Reshape Flatten Squeeze Unsqueeze Transpose
    Concat Split Slice Expand Tile Pad AveragePool GlobalAveragePool ReduceSum ReduceMean Shape Size Constant
    ConstantOfShape Range DepthToSpace SpaceToDepth Resize Upsample Equal Less Greater Not And Or
    LessOrEqual GreaterOrEqual Floor Ceil Round Sign SplitToSequence SequenceAt SequenceConstruct SequenceLength
    ConcatFromSequence""".split())
PRODUCT_CLASSES = ("conv", "matmul", "rnn")
RNN_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def op_class(op_type: str) -> str:
    """The roofline class of an op type ("other" when tag has no rule for it)."""
    return OP_CLASS.get(op_type, "other")


def has_rule(op_type: str) -> bool:
    """Whether tag has a cost rule for this op type."""
    return op_type in OP_CLASS


def _numel(t: TensorInfo | None) -> int:
    return int(np.prod(t.shape)) if t is not None and t.shape is not None else 0


def forward_flops(op: Op, ins: list[TensorInfo | None], outs: list[TensorInfo]) -> float:
    """Forward FLOPs of the whole op at the file's batch (see the module docstring for the rules)."""
    t, a = op.op_type, op.attrs
    out = outs[0] if outs else None
    x = ins[0] if ins else None
    n_out = _numel(out)
    if any(i is not None and i.shape is None for i in ins[:2]) or (out is not None and out.shape is None):
        return 0.0
    if t in ("Conv", "ConvInteger", "QLinearConv", "DeformConv"):
        w = ins[3] if t == "QLinearConv" else ins[1]
        bias = n_out if len(ins) > 2 and ins[2] is not None and t == "Conv" else 0
        return 2.0 * n_out * float(np.prod(w.shape[1:])) + bias
    if t == "ConvTranspose":
        w = ins[1]
        bias = n_out if len(ins) > 2 and ins[2] is not None else 0
        return 2.0 * _numel(x) * float(np.prod(w.shape[1:])) + bias
    if t == "Gemm":
        k = x.shape[0] if a.get("transA", 0) else x.shape[1]
        return 2.0 * n_out * k + (n_out if len(ins) > 2 and ins[2] is not None else 0)
    if t in ("MatMul", "MatMulInteger", "FusedMatMul", "QLinearMatMul"):
        k = x.shape[-1] if x.shape else 1
        return 2.0 * n_out * k
    if t == "Einsum":
        return _einsum_flops(a.get("equation", ""), ins)
    if t in RNN_GATES:  # per step, row and direction: G gate blocks of x W' and h R', and ~4 flops per gate unit
        w, r = ins[1], ins[2]
        if w is None or r is None or w.shape is None or r.shape is None:
            return 0.0
        n_dir, gh, i_size = (int(v) for v in w.shape)
        steps_rows = _numel(x) / max(i_size, 1)
        return float(n_dir * steps_rows * (2.0 * gh * (i_size + int(r.shape[-1])) + 4.0 * gh))
    if t in ("MaxPool", "AveragePool", "LpPool"):
        return float(n_out * int(np.prod(a.get("kernel_shape", [1]))))
    if t in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "CumSum", "TopK", "ArgMax", "ArgMin"):
        return float(_numel(x))
    if t == "LRN":
        return float(n_out * (2 * a.get("size", 1) + 3))
    if t in REDUCE_OPS:
        return float(_numel(x) * (2 if t in ("ReduceSumSquare", "ReduceL2", "ReduceLogSumExp") else 1))
    if t in ("Sum", "Max", "Min", "Mean"):
        return float(n_out * max(len([i for i in ins if i is not None]) - 1, 1))
    if t in ("Resize", "Upsample"):
        r = max(len(out.shape) - 2, 1)
        mode = a.get("mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        return float(n_out * (1 if mode == "nearest" else 2 * (4 if mode == "cubic" else 2) ** r))
    if t in ELEMENT_FLOPS:
        return float(ELEMENT_FLOPS[t] * max(n_out, _numel(x)))
    if op_class(t) == "elementwise":
        return float(n_out)
    return 0.0


def _einsum_flops(equation: str, ins) -> float:
    ins = [i for i in ins if i is not None]
    terms, _ = expand_einsum(equation, [len(i.shape) for i in ins])
    sizes: dict[str, int] = {}
    for term, t in zip(terms, ins):
        for c, d in zip(term, t.shape):
            sizes[c] = max(sizes.get(c, 1), int(d))
    total = float(np.prod(list(sizes.values()))) if sizes else 0.0
    return 2.0 * (len(ins) - 1) * total if len(ins) > 1 else total


def fill_costs(op: Op, tensors: dict[str, TensorInfo], file_batch: int, traced: set[str] = frozenset()) -> None:
    """Set op_class, FLOPs, memory traffic, output and saved bytes of `op` (per row + fixed).

    traced: the graph's `traced_constants` (ops reading only those and writing integers cost nothing)."""
    type_only = TYPE_ONLY_INPUTS.get(op.op_type, ())
    ins = [tensors[i] if i and k not in type_only else None for k, i in enumerate(op.inputs)]
    outs = [tensors[o] for o in op.outputs if o]
    op.op_class = op_class(op.op_type)
    if op.is_weight_generator:
        return
    if is_shape_plumbing(op, ins, outs, traced) or (op.op_class == "other" and not op.batched
                                             and all(o.dtype.startswith(("int", "uint", "bool")) for o in outs)):
        op.op_class = "shape"
    fb = max(file_batch, 1)
    rows_scale = op.batched or any(t is not None and t.batch_axis is not None for t in ins)
    fwd = forward_flops(op, ins, outs)
    bwd = fwd * (2.0 if op.op_class in PRODUCT_CLASSES else 1.0)
    if op.op_class == "shape":
        fwd = bwd = 0.0
    if rows_scale:
        op.fwd_flops_per_row, op.bwd_flops_per_row = fwd / fb, bwd / fb
    else:
        op.fwd_flops_fixed, op.bwd_flops_fixed = fwd, bwd
    op.out_bytes_per_row = sum(o.bytes_per_row(fb) for o in outs)
    op.out_bytes_fixed = sum(o.bytes_fixed() for o in outs)
    if op.op_type not in VIEW_OPS and op.op_class != "shape":
        per_row, fixed = op.out_bytes_per_row, op.out_bytes_fixed
        for k, t in enumerate(ins):
            if t is None:
                continue
            if k == 0 and (op.op_type == "SequenceAt" or (op.op_class == "gather" and t.role in ("param", "constant"))):
                per_row, fixed = per_row + op.out_bytes_per_row, fixed + op.out_bytes_fixed
            else:
                per_row += t.bytes_per_row(fb)
                fixed += t.bytes_fixed()
        op.mem_bytes_per_row, op.mem_bytes_fixed = per_row, fixed
    saved = saved_tensors(op, tensors)
    op.saved_bytes_per_row = sum(t.bytes_per_row(fb) for t in saved)
    op.saved_bytes_fixed = sum(t.bytes_fixed() for t in saved)


def traced_constants(ops: list[Op], tensors: dict[str, TensorInfo]) -> set[str]:
    """Names of the tensors an exporter traced from literals: outputs of ``Constant`` nodes and of ops that read
    only such tensors (`ops` in topological order). Graph inputs and stored initializers are not traced."""
    traced: set[str] = set()
    for op in ops:
        if all(i in traced for i in op.inputs if i):
            traced.update(o for o in op.outputs if o)
    return traced


def is_shape_plumbing(op: Op, ins, outs, traced: set[str]) -> bool:
    """Whether `op` is traced shape plumbing, which costs nothing (class "shape").

    Plumbing reads only traced constants (`traced_constants`) and writes only integers or booleans: the
    positions, index grids, causal masks and shape vectors an exporter traces from literals. Their values are
    fixed when the file is written, so runtimes fold them. Shape arithmetic on a tensor's runtime shape
    (``Shape(x)`` onwards) and ops on stored integer buffers (initializers such as DLRM's pair index, read on
    the device every step) keep their generic cost.
    """
    if op.batched or not outs or not all(t.name in traced for t in ins if t is not None):
        return False
    return all(o.dtype.startswith(("int", "uint", "bool")) for o in outs)


# op -> (tensors of its first output's shape it saves that are no graph tensor, whose dtype: its output's, its
# first input's, or a fixed one)
INTERNAL_SAVED = {"BatchNormalization": (2, "output"), "LayerNormalization": (3, "input"), "MaxPool": (1, "int64"),
                  "LSTM": (8, "output"), "GRU": (7, "output"), "RNN": (1, "output")}


def internal_saved_bytes(op: Op, tensors: dict[str, TensorInfo], file_batch: int = 1, dtypes=None,
                         op_id: int | None = None, graph=None) -> tuple[float, float]:
    """(per row, fixed) bytes `op` saves for its backward that are no graph tensor, as the deploy runtime's
    converters (`tag.deploy.onnx_torch`) run it: `INTERNAL_SAVED` tensors of its first output's shape.

    * inference-mode BatchNormalization runs as ``(x - mean) * rsqrt(var + eps) * scale + bias`` with mean and var
      trained as parameters (every float initializer is one): autograd keeps ``x - mean`` and ``(x - mean) *
      rsqrt(..)``, 2 tensors of the output's size and dtype (fp32 under autocast: x minus an fp32 vector), not x;
    * LayerNormalization: ``(x - mean) ** 2``, ``(x - mean) * inv`` and ``.. * scale`` keep two copies of ``x -
      mean`` and the normalised x: 3 in x's dtype (the scale's fp32 enters only at the last product), and not x;
    * MaxPool keeps its argmax indices (int64) besides its input;
    * the recurrent ops (`tag.deploy.onnx_torch.ops_rnn`): copies of Y [T, D, B, H], LSTM 8 and GRU 7 (per step
      the LSTM keeps i, f, c~, o, c, tanh(c) and h and the GRU z, r, the candidate, the reset product, h
      minus the candidate and h for the backward, 7 and 6; the steps' gradient buffers live at the backward's peak add
      0-3 more, depending on the model: measured on CPU ranks, benchmarks/memory.md), RNN 1 (h; not measured).

    dtypes: an `tag.graph.autocast.AutocastDtypes` (with `op_id` and `graph`) for the dtypes under autocast; None:
    the graph's. Corrections measured on CPU ranks (small_cnn, small_transformer: benchmarks/memory.md); each was
    its input only before. The memory model reads them (`group_held_bytes`); an op's ``saved_bytes_per_row``,
    which coarsening and the search's estimates read, keeps the rule of `saved_tensors`.
    """
    k, rule = INTERNAL_SAVED.get(op.op_type, (0, ""))
    if not k or (op.op_type == "BatchNormalization" and op.attrs.get("training_mode", 0)):
        return 0.0, 0.0
    out = next((tensors[o] for o in op.outputs if o and o in tensors), None)
    if out is None:
        return 0.0, 0.0
    if rule == "int64":
        dtype = "int64"
    elif dtypes is None:
        dtype = out.dtype
    elif rule == "input" and op.inputs and op.inputs[0] in tensors:
        dtype = dtypes.seen(graph, op_id, op.inputs[0])
    else:
        dtype = dtypes.produced.get(out.name, out.dtype)
    row, fixed = _bytes_as(out, dtype, file_batch)
    return k * row, k * fixed


def _bytes_as(t: TensorInfo, dtype: str, file_batch: int) -> tuple[float, float]:
    """(per row, fixed) bytes of tensor `t` stored as `dtype`."""
    from tag.graph.autocast import itemsize

    scale = itemsize(dtype) / t.itemsize
    return t.bytes_per_row(max(file_batch, 1)) * scale, t.bytes_fixed() * scale


def saved_tensors(op: Op, tensors: dict[str, TensorInfo]) -> list[TensorInfo]:
    """The activations (not parameters) `op` keeps for its backward that are graph tensors, by rule (the op's
    ``saved_bytes_per_row``, which coarsening and the search read): none for `SAVES_NOTHING` and shape ops, its
    first output for `SAVES_OUTPUT`,
    else its activation and data inputs that are not booleans."""
    if op.op_type in SAVES_NOTHING or op.op_class == "shape":
        return []
    type_only = TYPE_ONLY_INPUTS.get(op.op_type, ())
    if op.op_type in SAVES_OUTPUT:
        return [tensors[o] for o in op.outputs if o and o in tensors][:1]
    ins = [tensors.get(i) for k, i in enumerate(op.inputs) if i and k not in type_only]
    return [t for t in ins if t is not None and t.role in ("activation", "data") and not t.dtype.startswith("bool")]


def held_tensors(op: Op, tensors: dict[str, TensorInfo]) -> list[TensorInfo]:
    """The graph tensors `op` keeps for its backward as the deploy runtime runs it: `saved_tensors`, except the
    normalisations of `internal_saved_bytes` that keep other tensors instead of their input (MaxPool keeps both),
    and Mul / Div, whose autograd keeps an operand only for the other's gradient: none when the other is a
    constant or data (an attention score divided by a constant scale keeps nothing; measured, tests/graph)."""
    if op.op_type in INTERNAL_SAVED and op.op_type != "MaxPool" and any(internal_saved_bytes(op, tensors)):
        return []
    saved = saved_tensors(op, tensors)
    if op.op_type in ("Mul", "Div") and len(op.inputs) == 2:
        a, b = (tensors.get(n) for n in op.inputs)
        grad = {n: t is not None and t.role in ("activation", "param") for n, t in zip(op.inputs, (a, b))}
        other = {op.inputs[0]: op.inputs[1], op.inputs[1]: op.inputs[0]}
        saved = [t for t in saved if grad[other[t.name]] or (op.op_type == "Div" and t.name == op.inputs[1])]
    return saved


ALIAS_OPS = frozenset("Reshape Flatten Squeeze Unsqueeze Identity Dropout".split())  # outputs share their input's storage


def storage_root(name: str, graph) -> str:
    """The tensor whose storage `name` shares: followed back through `ALIAS_OPS` (views) to the first tensor an
    op computes (or a graph input)."""
    t = graph.tensors[name]
    while (t.producer is not None and graph.ops[t.producer].op_type in ALIAS_OPS and graph.ops[t.producer].inputs
           and graph.ops[t.producer].inputs[0] in graph.tensors):
        t = graph.tensors[graph.ops[t.producer].inputs[0]]
    return t.name


def group_held_bytes(graph, op_ids: list[int], outputs: list[str], with_data: bool = True,
                     dtypes=None) -> tuple[float, float]:
    """(per row, fixed) bytes an op group holds from its forward until its backward, when a runtime executes and
    back-propagates it as one unit (tag's deploy runtime; a framework's whole model is the one-group case).

    Held = the bytes its ops save that are no graph tensor (`internal_saved_bytes`) plus the distinct storages
    (`storage_root`) of the graph tensors its ops keep (`held_tensors`) and of its
    `outputs` (tensors other groups read, graph outputs: the roots of its backward), counting only storages the
    group computes or reads as data inputs (with_data=False: not those, held for the whole step elsewhere): an input
    computed by another group is held there (or, received from another device, as the received slice). Correction over summing ops' ``saved_bytes_per_row`` (measured on CPU
    ranks, benchmarks/memory.md): a tensor saved by several ops (an attention block's input read by the Q, K and V
    products) or saved as a view of another (Reshape) is one storage; a Relu keeps its output, not its input
    (freed in a framework, but the deploy runtime keeps a group's outputs until its backward).

    dtypes (`tag.graph.autocast.AutocastDtypes` under fp16/bf16; None: the graph's dtypes) adds what autocast
    keeps, each storage at its dtype (correction measured on CPU ranks: one factor of 1/2 on every activation
    predicted small_cnn bf16 44% low):

    * a lower-precision op (MatMul, Gemm, Conv, ...) saves 16-bit copies of its float inputs that are not 16-bit
      yet (one per op; its own storages, also of data inputs), and of its weights: Conv always, a product when its
      other operand needs a gradient (not a data input); a weight read directly (a leaf) once per group (autocast's
      cache), a weight view (Transpose) once per op;
    * each float activation input computed by another group and not 16-bit there is held as a 16-bit copy (deploy's
      input leaf, kept until the group's backward).
    """
    from tag.graph.autocast import FLOATS, LOWER_PRECISION_OPS

    fb = max(graph.file_batch, 1)
    half = dtypes.half if dtypes is not None else ""
    mine = {o for i in op_ids for o in graph.ops[i].outputs if o}
    held: dict[tuple, tuple[float, float]] = {}

    def at(name: str, dtype: str | None = None) -> tuple[float, float]:
        t = graph.tensors[name]
        d = dtype or (dtypes.produced.get(name, t.dtype) if dtypes is not None else t.dtype)
        return _bytes_as(t, d, fb)

    def root(name: str) -> None:
        r = storage_root(name, graph)
        if r in mine or (with_data and graph.tensors[r].role == "data"):
            held[("root", r)] = at(r)

    for i in op_ids:
        op = graph.ops[i]
        ins = [n for n in op.inputs if n in graph.tensors]
        if half:
            for n in ins:
                if dtypes.crosses(graph, i, n) and dtypes.produced.get(n) in FLOATS and dtypes.produced[n] != half:
                    held[("leaf", n)] = at(n, half)
        cast = half and op.op_type in LOWER_PRECISION_OPS
        for t in held_tensors(op, graph.tensors):
            if t.name not in graph.tensors:
                continue
            seen = dtypes.seen(graph, i, t.name) if half and t.name in ins else ""
            if cast and seen in FLOATS and seen != half:
                held[("cast", i, t.name)] = at(t.name, half)
            elif not (half and dtypes.crosses(graph, i, t.name)):  # a crossing input is its leaf (above) or elsewhere
                root(t.name)
        if cast:
            operands = ins[:2]
            for k, n in enumerate(operands):
                other = operands[1 - k] if len(operands) == 2 else None
                if graph.tensors[n].role != "param" or dtypes.seen(graph, i, n) == half:
                    continue
                if op.op_type in ("Conv", "ConvTranspose") or (other is not None
                                                                 and graph.tensors[other].role != "data"):
                    key = ("cast", n) if graph.tensors[n].producer is None else ("cast", i, n)
                    held[key] = at(n, half)
    for n in outputs:
        if n in graph.tensors:
            root(n)
    inner = [internal_saved_bytes(graph.ops[i], graph.tensors, fb, dtypes, i, graph) for i in op_ids]
    per_row = sum(b[0] for b in held.values()) + sum(x[0] for x in inner)
    fixed = sum(b[1] for b in held.values()) + sum(x[1] for x in inner)
    return per_row, fixed
