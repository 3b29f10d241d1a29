"""Which splits a group's weights allow, and what each of its ops does under them (tensor sharding, issue 22).

`analyse_group(graph, op_ids, split)` propagates a *layout* through the group's ops in topological order. A tensor
is either whole ("full") or split along one axis into the units of a **pair** (a set of weights split alike: a
column-split projection and what follows it). The group's inputs are full. Per op:

* **weight op** (MatMul or Gemm with a weight parameter, possibly through a Transpose weight generator; Conv with a
  weight parameter, ungrouped): with a full input it is split by **columns** (output features / channels; a new
  pair), its output split; with a split input it is split by **rows** (input features of that pair), its output a
  partial sum that the replica's devices all-reduce (`ShardLayout.reduce_outputs`), full afterwards. Split
  ``column`` allows no row half; split ``row`` turns the group's first weight op with a full input into a row half
  whose input each device narrows to its own features (`ShardLayout.narrow_inputs`); ``heads`` allows both
  (the Megatron pair: column then row, one all-reduce).
* **elementwise ops** keep a split when every split input has it on the same axis (counted from the end) and every
  other input broadcasts over that axis (size 1 there) or is a parameter of the split axis's length (a bias: sliced
  alike).
* **Reshape** moves a split: splitting the split axis F into (..., H, D, ...) with H x D = F puts the split on H (the
  pair's units become H: heads); merging (H, D) back puts it on the merged axis. The reshape's target shape at that
  axis is rewritten per device (`ShardLayout.reshape_rewrites`). **Transpose** permutes it.
* **MatMul of two activations** (Q K^T, P V) keeps a split on a batch axis both share; **Softmax**, reductions and
  normalisations keep a split off their axes; per-channel ops (BatchNormalization, pooling) keep a split of the
  channel axis (their per-channel parameters sliced alike); **Flatten** at the split axis makes it the last axis. Anything else with a split input makes the split invalid here (the
  reason names the op).

A group output still split at the end is all-gathered by whoever needs it whole (`ShardLayout.split_outputs`).
Each pair's units: heads when a Reshape exposed them, else the features of its column op (unit width 1). Heads need
shares that split them exactly (`tag.strategy.shard.exact_units`).

Work: ops that read or write a split tensor, or whose weight is sliced, do a device's share of their work
(`ShardLayout.sharded_ops`); the others run whole on every device of the replica.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Relu", "LeakyRelu", "Gelu", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Sqrt",
    "Neg", "Abs", "Cast", "Identity", "Dropout", "Clip", "Softplus", "HardSigmoid", "HardSwish", "Elu", "Selu",
    "Reciprocal", "Where", "Max", "Min", "Not", "Equal", "Less", "Greater", "CastLike", "IsNaN", "Sign", "Floor",
    "Ceil", "Round", "Mish", "Swish", "SiLU", "Silu", "FastGelu", "BiasGelu",
})
ALONG_AXIS = frozenset({"Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                        "ReduceL2", "ReduceLogSumExp", "LayerNormalization", "RMSNormalization"})
CHANNEL_OPS = frozenset({"BatchNormalization", "InstanceNormalization", "MaxPool", "AveragePool", "GlobalAveragePool",
                         "GlobalMaxPool", "LpPool"})  # work per channel (axis 1): a split on axis 1 passes through
SPLITS = ("column", "row", "heads")


@dataclass
class Pair:
    """A set of weights split alike: `features` elements on the split axis of its column op's output; `units`
    (heads, or = features) once known."""

    features: int
    units: int | None = None

    @property
    def width(self) -> int:
        """Elements per unit on the column op's output axis."""
        return self.features // (self.units or self.features)


@dataclass(frozen=True)
class ParamSlice:
    """Parameter `name` is sliced on `axis` by the units of pair `pair`; `length` elements on that axis (a device
    holds length / units elements per unit it has)."""

    name: str
    axis: int
    pair: int
    length: int


@dataclass(frozen=True)
class ReshapeRewrite:
    """Reshape op `op` (graph index): its target shape's entry `position`, `length` elements whole, becomes the
    device's share of them: length x (its units of pair `pair`) / (the pair's units)."""

    op: int
    position: int
    pair: int
    length: int


@dataclass
class ShardLayout:
    """What a split does to one group (module docstring). `units[p]`, `exact[p]`: pair p's units and whether
    shares must split them exactly (heads)."""

    split: str
    units: list[int] = field(default_factory=list)
    exact: list[bool] = field(default_factory=list)
    params: list[ParamSlice] = field(default_factory=list)
    sharded_ops: set[int] = field(default_factory=set)
    reduce_outputs: list[str] = field(default_factory=list)  # partial sums all-reduced over the replica
    narrow_inputs: list[tuple[int, int, int]] = field(default_factory=list)  # (op, input index, pair): row halves
    split_outputs: dict[str, tuple[int, int]] = field(default_factory=dict)  # group output -> (axis, pair)
    reshape_rewrites: list[ReshapeRewrite] = field(default_factory=list)
    bias_once: list[str] = field(default_factory=list)  # Gemm biases of row halves: added by position 0 only
    # full inputs of column halves: the replica's devices all-reduce their gradients in backward (Megatron's f)
    column_inputs: list[str] = field(default_factory=list)
    split_tensors: dict[str, tuple[int, int]] = field(default_factory=dict)  # every tensor left split -> (axis, pair)


class NotShardable(Exception):
    """The split does not apply to the group; the message says which op stops it."""


def _shape(graph, name):
    t = graph.tensors.get(name)
    return None if t is None or t.shape is None else tuple(t.shape)


def _is_param(graph, name) -> bool:
    t = graph.tensors.get(name)
    return t is not None and t.role == "param"


def _weight_source(graph, name):
    """(parameter name, perm or None) when tensor `name` is a parameter or a Transpose of one (a weight generator),
    else None. A parameter is an initializer, or the output of a weight generator such as the light ONNX zoo's
    ConstantOfShape (deploy trains it under that output's name)."""
    t = graph.tensors.get(name)
    if t is None:
        return None
    if t.producer is not None:
        op = graph.ops[t.producer]
        if (op.op_type == "Transpose" and op.is_weight_generator and len(op.inputs) == 1
                and _is_param(graph, op.inputs[0])):
            shape = _shape(graph, op.inputs[0])
            perm = op.attrs.get("perm") or list(reversed(range(len(shape or ()))))
            return op.inputs[0], tuple(perm)
    return (name, None) if t.role == "param" else None


def _weight_axes(graph, op):
    """(data input index, weight tensor, weight axis of output features, weight axis of input features, bias input
    or None) of a weight op, else None."""
    if op.op_type == "MatMul" and len(op.inputs) == 2:
        w = op.inputs[1]
        if _weight_source(graph, w) is None:
            return None
        return 0, w, -1, -2, None
    if op.op_type == "Gemm" and len(op.inputs) >= 2:
        w = op.inputs[1]
        if _weight_source(graph, w) is None or op.attrs.get("transA", 0):
            return None
        tb = op.attrs.get("transB", 0)
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] else None
        return 0, w, (0 if tb else 1), (1 if tb else 0), bias
    if op.op_type == "Conv" and len(op.inputs) >= 2 and _is_param(graph, op.inputs[1]):
        if int(op.attrs.get("group", 1)) != 1:
            return None
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] else None
        return 0, op.inputs[1], 0, 1, bias
    return None


def _param_slice(graph, w: str, axis: int, pair: int) -> ParamSlice:
    """The slice of the parameter behind weight tensor `w` (through its Transpose) on weight axis `axis`."""
    name, perm = _weight_source(graph, w)
    shape = _shape(graph, w)
    axis = axis % len(shape)
    src_axis = perm[axis] if perm is not None else axis
    return ParamSlice(name, src_axis, pair, shape[axis])


class _Pairs:
    """Pairs with union-find: two split tensors combined (Q with K, scores with V) put their pairs together."""

    def __init__(self):
        self.parent: list[int] = []
        self.pairs: list[Pair] = []

    def new(self, features: int) -> int:
        self.parent.append(len(self.parent))
        self.pairs.append(Pair(features))
        return len(self.parent) - 1

    def find(self, p: int) -> int:
        while self.parent[p] != p:
            self.parent[p] = self.parent[self.parent[p]]
            p = self.parent[p]
        return p

    def get(self, p: int) -> Pair:
        return self.pairs[self.find(p)]

    def union(self, a: int, b: int) -> bool:
        """Join pairs a and b; False when they cannot be one (other features or units)."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        pa, pb = self.pairs[ra], self.pairs[rb]
        if pa.features != pb.features or (pa.units and pb.units and pa.units != pb.units):
            return False
        pa.units = pa.units or pb.units
        self.parent[rb] = ra
        return True


def analyse_group(graph, op_ids, split: str) -> ShardLayout:
    """The layout of `split` over the ops `op_ids` (one group, any order; walked in graph order). Raises
    NotShardable when it does not apply; a group with no weight op to split is not shardable."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}")
    lay = ShardLayout(split)
    pairs = _Pairs()
    layout: dict[str, tuple[int, int]] = {}  # tensor -> (axis counted from the end (negative), pair)
    ids = sorted(op_ids)
    inside = set(ids)

    def fail(op, why: str):
        raise NotShardable(f"{split}: {op.op_type} {op.name} {why}")

    def joined(op, splits) -> tuple[int, int]:
        """The one (axis, pair) of several split inputs: same axis, pairs joined."""
        axes = {ax for ax, _ in splits}
        if len(axes) != 1:
            fail(op, "combines tensors split on different axes")
        first = splits[0][1]
        for _, p in splits[1:]:
            if not pairs.union(first, p):
                fail(op, "combines tensors split into different units")
        return splits[0][0], first

    for i in ids:
        op = graph.ops[i]
        if op.is_weight_generator:
            continue
        split_in = {k: layout[t] for k, t in enumerate(op.inputs) if t in layout}
        outs = list(op.outputs)
        wa = _weight_axes(graph, op)
        if wa is not None:
            data_k, w, out_ax, in_ax, bias = wa
            conv = op.op_type == "Conv"
            if data_k not in split_in and split == "row":
                if pairs.pairs:
                    fail(op, "is a second weight op (a row split shards one)")
                shape = _shape(graph, op.inputs[data_k])
                p = pairs.new(shape[1 if conv else -1])
                lay.narrow_inputs.append((i, data_k, p))
                lay.params.append(_param_slice(graph, w, in_ax, p))
                lay.reduce_outputs.append(outs[0])
                lay.bias_once += [bias] if bias else []
            elif data_k not in split_in:
                out_shape = _shape(graph, outs[0])
                feat = 1 - len(out_shape) if conv else -1
                p = pairs.new(out_shape[feat])
                if op.inputs[data_k] not in lay.column_inputs:
                    lay.column_inputs.append(op.inputs[data_k])
                lay.params.append(_param_slice(graph, w, out_ax, p))
                if bias:
                    lay.params.append(ParamSlice(bias, 0, p, _shape(graph, bias)[0]))
                layout[outs[0]] = (feat, p)
            elif split == "column":
                fail(op, "takes a split input (a column split shards one weight op's outputs)")
            else:
                ax, p = split_in[data_k]
                if ax != (1 - len(_shape(graph, op.inputs[data_k])) if conv else -1):
                    fail(op, "takes an input split off its feature axis")
                lay.params.append(_param_slice(graph, w, in_ax, p))
                lay.reduce_outputs.append(outs[0])
                lay.bias_once += [bias] if bias else []
            lay.sharded_ops.add(i)
            continue
        if not split_in:
            continue
        lay.sharded_ops.add(i)
        t = op.op_type
        if t in ELEMENTWISE:
            ax, p = joined(op, list(split_in.values()))
            for k, name in enumerate(op.inputs):
                if k in split_in or not name:
                    continue
                shape = _shape(graph, name)
                if shape is None or len(shape) < -ax or shape[ax] == 1:
                    continue
                if _is_param(graph, name) and len(shape) == 1:
                    lay.params.append(ParamSlice(name, 0, p, shape[0]))
                    continue
                fail(op, f"combines a split tensor with whole {name}")
            for o in outs:
                layout[o] = (ax, p)
        elif t == "Reshape":
            if set(split_in) != {0}:
                fail(op, "takes a split target shape")
            _reshape(graph, i, op, split_in[0], layout, pairs, lay, fail)
        elif t == "Transpose":
            ax, p = split_in[0]
            rank = len(_shape(graph, op.inputs[0]))
            perm = op.attrs.get("perm") or list(reversed(range(rank)))
            layout[outs[0]] = (list(perm).index(ax % rank) - rank, p)
        elif t == "MatMul":
            if set(split_in) != {0, 1}:
                fail(op, "multiplies a split tensor with a whole one")
            r0, r1 = len(_shape(graph, op.inputs[0])), len(_shape(graph, op.inputs[1]))
            ax, p = joined(op, [split_in[0], split_in[1]])
            if ax >= -2 or r0 != r1:
                fail(op, "contracts its split axis")
            layout[outs[0]] = (ax, p)
        elif t in CHANNEL_OPS:
            ax, p = split_in[0]
            rank = len(_shape(graph, op.inputs[0]))
            if set(split_in) != {0} or ax % rank != 1:
                fail(op, "needs its input split by channels")
            for name in op.inputs[1:]:
                shape = _shape(graph, name) if name else None
                if shape is not None and len(shape) == 1:
                    lay.params.append(ParamSlice(name, 0, p, shape[0]))
            layout[outs[0]] = (ax, p)
        elif t == "Flatten":
            ax, p = split_in[0]
            rank = len(_shape(graph, op.inputs[0]))
            if ax % rank != int(op.attrs.get("axis", 1)) % rank:
                fail(op, "flattens other axes into the split one")
            layout[outs[0]] = (-1, p)
        elif t in ALONG_AXIS:
            ax, p = split_in[0]
            if set(split_in) != {0}:
                fail(op, "takes a split scale or bias")
            rank = len(_shape(graph, op.inputs[0]))
            if ax % rank in _op_axes(op, rank):
                fail(op, "works along the split axis")
            if op.attrs.get("keepdims", 1) == 0 and t.startswith("Reduce"):
                fail(op, "drops axes")
            layout[outs[0]] = (ax, p)
        else:
            fail(op, "has no rule for a split input")
    if not pairs.pairs:
        raise NotShardable(f"{split}: no weight op to split")
    return _resolve(lay, pairs, layout, graph, inside)


def _resolve(lay: ShardLayout, pairs: _Pairs, layout: dict, graph, inside: set) -> ShardLayout:
    """Number the joined pairs 0.. in order of first use and rewrite every reference to them."""
    order: dict[int, int] = {}
    for p in range(len(pairs.parent)):
        order.setdefault(pairs.find(p), len(order))

    def num(p: int) -> int:
        return order[pairs.find(p)]

    roots = sorted(order, key=order.get)
    lay.units = [pairs.pairs[r].units or pairs.pairs[r].features for r in roots]
    lay.exact = [pairs.pairs[r].units is not None and pairs.pairs[r].units != pairs.pairs[r].features for r in roots]
    lay.params = list(dict.fromkeys(ParamSlice(x.name, x.axis, num(x.pair), x.length) for x in lay.params))
    lay.narrow_inputs = [(i, k, num(p)) for i, k, p in lay.narrow_inputs]
    lay.reshape_rewrites = [ReshapeRewrite(r.op, r.position, num(r.pair), r.length) for r in lay.reshape_rewrites]
    lay.split_tensors = {name: (ax, num(p)) for name, (ax, p) in layout.items()}
    for name, (ax, p) in layout.items():
        t = graph.tensors.get(name)
        consumers = t.consumers if t is not None else []
        if name in graph.outputs or any(c not in inside for c in consumers):
            lay.split_outputs[name] = (ax, num(p))
    return lay


def _op_axes(op, rank: int) -> set[int]:
    """The axes a Softmax / reduction / normalisation works along (non-negative); all of them when unknown."""
    t = op.op_type
    if t in ("Softmax", "LogSoftmax"):
        return {int(op.attrs.get("axis", -1)) % rank}
    if t in ("LayerNormalization", "RMSNormalization"):
        return set(range(int(op.attrs.get("axis", -1)) % rank, rank))
    axes = op.attrs.get("axes")
    return set(range(rank)) if axes is None else {int(a) % rank for a in axes}


def _reshape(graph, i, op, split_in, layout, pairs: _Pairs, lay, fail) -> None:
    """Move a split through Reshape op `i` (module docstring) and record the target-shape rewrite."""
    ax, p = split_in
    src, dst = _shape(graph, op.inputs[0]), _shape(graph, op.outputs[0])
    if src is None or dst is None:
        fail(op, "has unknown shapes")
    a = ax % len(src)
    before = 1
    for d in src[:a]:
        before *= d
    acc, j = 1, 0  # output axes 0..j-1 hold exactly the input axes before a
    while j < len(dst) and acc < before:
        acc *= dst[j]
        j += 1
    if acc != before or j >= len(dst):
        fail(op, "regroups the axes before the split")
    f, pr = src[a], pairs.get(p)
    if dst[j] == f:  # kept whole
        length = f
    elif f % dst[j] == 0:  # split into (H, D, ...): the split goes to H, the pair's units
        h = dst[j]
        units = h * (pr.features // f)
        if pr.units not in (None, units):
            fail(op, "splits the axis into other units than before")
        pr.units, length = units, h
    else:  # merged with the axes after it
        prod, k = f, a + 1
        while prod < dst[j] and k < len(src):
            prod *= src[k]
            k += 1
        if prod != dst[j]:
            fail(op, "reshapes the split axis other than into or out of heads")
        length = prod
    layout[op.outputs[0]] = (j - len(dst), p)
    lay.reshape_rewrites.append(ReshapeRewrite(i, j, p, length))
