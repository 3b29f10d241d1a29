"""`load_model`: an ONNX file -> an `OpGraph` with roles, shapes, batch axes, parameters and costs.

Parameters: float initializers (rank >= 1), float non-data inputs, and the outputs of *generator* ops
(ConstantOfShape, Random*, EyeLike) that are computed from constants only: the light ONNX zoo stores its
weights that way. Static ops (no data-dependent input) that produce or transform a parameter
(``Transpose(W)``, ``Unsqueeze(gamma)``) are weight generators: zero compute, and their outputs stand for
the parameters they were made from. Every other static float tensor (masks, scalars) is a constant.
A parameter is counted once, on its first consumer that is not a weight generator, in topological order.
"""

from __future__ import annotations

import onnx
from onnx import helper

from tag.graph.batch_axis import propagate_batch
from tag.graph.costs import fill_costs, has_rule, traced_constants
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.graph.reader import file_sha256, read_model
from tag.graph.roles import assign_roles
from tag.graph.shapes import complete_shapes, constant_values, fold_shape_values, np_dtype_name
from tag.graph.toposort import stable_topological_order

GENERATOR_SOURCES = frozenset("ConstantOfShape RandomNormal RandomUniform RandomNormalLike RandomUniformLike EyeLike".split())
_SCALAR_ATTR_TYPES = (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
                      onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRINGS)


def global_batch(file_batch: int, batch_size: int | None, n_devices: int = 1) -> int:
    """The planning batch (DESIGN.md § Batch): `batch_size`, else the file's batch if > 1, else 32 per device."""
    if batch_size is not None:
        return int(batch_size)
    return int(file_batch) if file_batch > 1 else 32 * max(int(n_devices), 1)


def load_model(path, *, data_inputs=(), input_shapes=None, batch_size=None, n_devices=1) -> OpGraph:
    """Read an ONNX model into an OpGraph (FLOPs, bytes and params per batch row + fixed).

    Raises InputError(file, "input 'x'" or "node 'name' (OpType)", expected, found) on a bad model.

    >>> g = load_model("resnet50.onnx")                          # doctest: +SKIP
    >>> round(g.param_count / 1e6, 1), g.file_batch, g.batch_size  # doctest: +SKIP
    (25.6, 1, 32)
    """
    path = str(path)
    if batch_size is not None and int(batch_size) <= 0:
        from tag.errors import InputError
        raise InputError("--batch-size", "value", "a positive integer", str(batch_size))
    model = read_model(path)
    roles = assign_roles(model, path, data_inputs)
    shp = complete_shapes(model, path, roles, input_shapes)
    g = model.graph
    consts = constant_values(model)
    fold_shape_values(list(g.node), shp.dtypes, shp.shapes, consts, use_shapes=False)
    nodes = _topological(list(g.node))
    tensors = _tensors(g, roles, shp)
    ops = _ops(nodes, tensors, shp)
    _static_roles(ops, tensors)
    roots = _param_roots(ops, tensors)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 9)
    data = list(roles.data)
    probe = _probe_shapes(model, path, roles, shp)
    batch_constants = propagate_batch(ops, tensors, data, shp.file_batch, consts, opset, shp.values, probe)
    counted: set[str] = set()
    traced = traced_constants(ops, tensors)
    for op in ops:
        fill_costs(op, tensors, shp.file_batch, traced)
        if op.is_weight_generator:
            continue
        mine = []
        for name in op.inputs:
            for r in roots.get(name, ()):
                if r not in mine:
                    mine.append(r)
        op.params = mine
        for r in mine:
            if r not in counted and tensors[r].numel is not None:
                counted.add(r)
                op.param_count += tensors[r].numel
                op.param_bytes += float(tensors[r].numel * tensors[r].itemsize)
    unknown = sorted({op.op_type if op.domain in ("", "ai.onnx") else f"{op.domain}.{op.op_type}"
                      for op in ops if not has_rule(op.op_type)})
    warnings = [f"no cost rule for op types {', '.join(unknown)}: costed as memory-bound"] if unknown else []
    param_names = [n for n, t in tensors.items() if t.role == "param" and n in roots and roots[n] == (n,)]
    return OpGraph(path=path, ops=ops, tensors=tensors, data_inputs=data, param_names=param_names,
                   outputs=[o.name for o in g.output], file_batch=shp.file_batch,
                   batch_size=global_batch(shp.file_batch, batch_size, n_devices), batch_constants=batch_constants,
                   input_shapes={k: tuple(v) for k, v in (input_shapes or {}).items()}, sha256=file_sha256(path), warnings=warnings)


PROBE_BATCH = 7  # a batch no other dim is likely to equal


def _probe_shapes(model, path, roles, shp) -> dict | None:
    """Shapes at batch PROBE_BATCH when every data input's batch dim is symbolic (None otherwise or on failure)."""
    from tag.graph.roles import declared_dims

    vis = {vi.name: vi for vi in model.graph.input}
    given = {}
    for name in roles.data:
        dims = declared_dims(vis[name])
        if not dims or not isinstance(dims[0], str):
            return None
        given[name] = (PROBE_BATCH,) + tuple(shp.input_shapes[name][1:])
    try:
        return complete_shapes(model, path, roles, given, evaluate=False).shapes
    except Exception:
        return None


def _topological(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """Nodes in the shared stable topological order (tag.graph.toposort), keeping file order where valid."""
    return [nodes[i] for i in stable_topological_order(nodes)]


def _tensors(g: onnx.GraphProto, roles, shp) -> dict[str, TensorInfo]:
    tensors: dict[str, TensorInfo] = {}
    role_of = {n: "data" for n in roles.data}
    role_of.update({n: "param" for n in roles.params})
    role_of.update({n: "constant" for n in roles.constants})
    for vi in g.input:
        tensors[vi.name] = TensorInfo(vi.name, shp.dtypes.get(vi.name, "float32"), shp.shapes.get(vi.name),
                                      role=role_of.get(vi.name, "param"))
    for t in g.initializer:
        tensors[t.name] = TensorInfo(t.name, np_dtype_name(t.data_type), tuple(int(d) for d in t.dims),
                                     role=role_of.get(t.name, "constant"))
    return tensors


def _ops(nodes, tensors: dict[str, TensorInfo], shp) -> list[Op]:
    ops: list[Op] = []
    taken: set[str] = set()
    for i, n in enumerate(nodes):
        name = n.name or f"{n.op_type}_{i}"
        while name in taken:
            name = f"{name}_{i}"
        taken.add(name)
        attrs = {}
        for a in n.attribute:
            if a.type in _SCALAR_ATTR_TYPES:
                v = helper.get_attribute_value(a)
                attrs[a.name] = v.decode() if isinstance(v, bytes) else v
        op = Op(name=name, op_type=n.op_type, domain=n.domain, inputs=list(n.input), outputs=list(n.output), attrs=attrs)
        for x in n.input:
            if x and x in tensors:
                tensors[x].consumers.append(i)
        for o in n.output:
            if o:
                tensors[o] = TensorInfo(o, shp.dtypes.get(o, "float32"), shp.shapes.get(o), producer=i)
        ops.append(op)
    return ops


def _static_roles(ops: list[Op], tensors: dict[str, TensorInfo]) -> None:
    """Roles of outputs of static ops: parameters if made by a generator or from a parameter, else constants."""
    for op in ops:
        ins = [tensors[x] for x in op.inputs if x]
        if any(t.role in ("data", "activation") for t in ins):
            continue
        makes_param = op.op_type in GENERATOR_SOURCES or any(t.role == "param" for t in ins)
        for o in op.outputs:
            if not o:
                continue
            t = tensors[o]
            is_float = t.dtype.startswith(("float", "bfloat"))
            t.role = "param" if (makes_param and is_float and op.op_type != "Constant") else "constant"
        op.is_weight_generator = any(tensors[o].role == "param" for o in op.outputs if o)


def _param_roots(ops: list[Op], tensors: dict[str, TensorInfo]) -> dict[str, tuple[str, ...]]:
    """For every parameter tensor, the root parameters it stands for (itself for a root)."""
    roots: dict[str, tuple[str, ...]] = {n: (n,) for n, t in tensors.items() if t.role == "param" and t.producer is None}
    for op in ops:
        if not op.is_weight_generator:
            continue
        from_params = []
        for x in op.inputs:
            for r in roots.get(x, ()):
                if r not in from_params:
                    from_params.append(r)
        for o in op.outputs:
            if o and tensors[o].role == "param":
                roots[o] = tuple(from_params) if from_params else (o,)
    return roots
