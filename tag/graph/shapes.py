"""Shape completion (DESIGN.md § Shapes): every tensor's dtype and concrete shape at the file's batch.

Data inputs get concrete dims (a symbolic leading dim becomes 1; other symbolic dims come from
``--input-shape``), then onnx shape inference runs with data propagation on a weight-free copy of the graph,
in rounds: after each, tag shapes sequence tensors and what is read out of them (tag.graph.sequences, given
back to the next round as value_info) and evaluates the small shape arithmetic inference missed on known
values (`fold_shape_values`: Shape of known shapes, integer and small float literals, e.g. the float
``Constant`` that the dynamo exporter casts with CastLike into a ``Range`` limit), given back as initializers.
This needs no weights, so it works on the meta-device exports of models too big to evaluate. Where gaps
remain in tensors that are used, ``onnx.reference.ReferenceEvaluator`` runs the graph once on a zero input of
those shapes (when its inputs fit in 1 GiB) and reads the shapes off the results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tag.errors import InputError
from tag.graph.roles import Roles, declared_dims, elem_type
from tag.graph.sequences import SEQUENCE_PRODUCERS, fill_sequence_shapes

_EVAL_FEED_LIMIT_BYTES = 1 << 30  # the evaluator fallback never allocates more than this for its inputs
_BIG_INIT_NUMEL = 4096  # float initializers above this become typed inputs in the inference copy


@dataclass
class Shapes:
    dtypes: dict[str, str]  # tensor name -> numpy dtype name
    shapes: dict[str, tuple[int, ...] | None]  # tensor name -> concrete shape (None if unknown)
    input_shapes: dict[str, tuple[int, ...]]  # concrete shapes of the data inputs
    file_batch: int
    values: dict[str, np.ndarray]  # small integer tensors whose values are known at the file's batch


def np_dtype_name(onnx_type: int) -> str:
    """numpy dtype name of an ONNX element type ("float32", "int64", ...); "float32" if unknown."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type)).name
    except Exception:
        return "bfloat16" if onnx_type == onnx.TensorProto.BFLOAT16 else "float32"


def data_input_shapes(model: onnx.ModelProto, path: str, roles: Roles,
                      given: dict[str, tuple[int, ...]] | None) -> dict[str, tuple[int, ...]]:
    """Concrete shapes of the data inputs: declared dims, leading symbolic dim -> 1, rest from `given`."""
    given = dict(given or {})
    vis = {vi.name: vi for vi in model.graph.input}
    for name in given:  # before any data input's own shape check, so the error names the input the user wrote
        if name not in roles.data:
            hint = " (a graph input that is not a data input: name it with --data-input)" if name in vis else ""
            raise InputError(path, f"--input-shape {name}=...",
                             "the name of a data input of the model: " + ", ".join(roles.data),
                             f"no data input named '{name}'{hint}")
    out: dict[str, tuple[int, ...]] = {}
    for name in roles.data:
        dims = declared_dims(vis[name])
        if name in given:
            if dims is not None and len(dims) != len(given[name]):
                raise InputError(path, f"input '{name}'", f"--input-shape {name}=DIMS with {len(dims)} dims, the batch "
                                 f"first (e.g. {_shape_example(name, dims)})", "x".join(map(str, given[name])))
            out[name] = tuple(given[name])
            continue
        if dims is None:
            raise InputError(path, f"input '{name}'", f"a declared shape, or --input-shape {name}=DIMS", "no shape")
        fixed = [1 if (i == 0 and isinstance(d, str)) else d for i, d in enumerate(dims)]
        symbolic = [str(d) for d in fixed if isinstance(d, str)]
        if dims and isinstance(dims[0], int) and len(symbolic) == 1:  # the batch elsewhere (time-major), or a length
            axis = next(i for i, d in enumerate(dims) if isinstance(d, str))
            raise InputError(path, f"input '{name}'", f"the batch on axis 0: if {symbolic[0]} is the batch "
                             "(a time-major input), export the model batch-first (e.g. torch.nn.LSTM(..., "
                             "batch_first=True), or transpose inside it); if it is a length, --input-shape "
                             f"{_shape_example(name, dims)}",
                             f"dims [{', '.join(str(d) for d in dims)}], the symbolic {symbolic[0]} on axis {axis}")
        if symbolic or any(d == 0 for d in fixed if isinstance(d, int)):
            raise InputError(path, f"input '{name}'", f"concrete non-batch dims, or --input-shape {name}=DIMS "
                             f"(e.g. {_shape_example(name, dims)})",
                             "symbolic dims [" + ", ".join(str(d) for d in dims) + "]")
        out[name] = tuple(int(d) for d in fixed)
    return out


def _shape_example(name: str, dims) -> str:
    """An --input-shape value for declared `dims`: 1 for the batch (--batch-size sets it), the concrete dims as they
    are, 128 for each other symbolic one.

    >>> _shape_example("ids", ["batch", "seq"])
    'ids=1x128'
    """
    return f"{name}=" + "x".join("1" if i == 0 else (str(d) if isinstance(d, int) and d > 0 else "128")
                                 for i, d in enumerate(dims))


def complete_shapes(model: onnx.ModelProto, path: str, roles: Roles,
                    given: dict[str, tuple[int, ...]] | None = None, evaluate: bool = True) -> Shapes:
    """Every tensor's dtype and shape at the file's batch (see the module docstring).

    evaluate: run the reference evaluator where inference leaves gaps.
    """
    g = model.graph
    data_shapes = data_input_shapes(model, path, roles, given)
    file_batch = data_shapes[roles.data[0]][0] if data_shapes[roles.data[0]] else 1
    inputs = []
    for vi in g.input:
        if vi.name in data_shapes:
            inputs.append(helper.make_tensor_value_info(vi.name, elem_type(vi), data_shapes[vi.name]))
        elif vi.name in {t.name for t in g.initializer}:
            continue
        else:
            dims = declared_dims(vi)
            if dims is None or any(isinstance(d, str) for d in dims):
                raise InputError(path, f"input '{vi.name}'", "a parameter input with static dims (or name it with --data-input)",
                                 f"dims {dims}")
            inputs.append(vi)
    inits = []
    for t in g.initializer:
        numel = int(np.prod(t.dims)) if t.dims else 1
        external = t.data_location == onnx.TensorProto.EXTERNAL
        if external or (t.data_type in (1, 10, 11, 16) and numel > _BIG_INIT_NUMEL):
            inputs.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            inits.append(t)
    outputs = [helper.make_tensor_value_info(o.name, elem_type(o), None) for o in g.output]
    nodes = list(g.node)
    values = {**constant_values(model, floats=True), **constant_values(model)}
    sequence_outputs = {o for n in nodes if n.op_type in SEQUENCE_PRODUCERS for o in n.output}
    dtypes: dict[str, str] = {}
    shapes: dict[str, tuple[int, ...] | None] = {}
    hints: dict[str, tuple[int, ...]] = {}  # tensors tag shaped itself, given to the next inference
    for _ in range(8):  # infer, shape sequences, fold shape arithmetic that data propagation missed, infer again
        value_info = [helper.make_tensor_value_info(n, _onnx_type(dtypes[n]), s) for n, s in hints.items()]
        graph = helper.make_graph(nodes, g.name or "g", inputs, outputs, initializer=inits, value_info=value_info)
        light = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=max(model.ir_version, 7))
        inferred = _infer(light)
        _read_value_infos(inferred, inits, dtypes, shapes)
        filled = fill_sequence_shapes(list(g.node), dtypes, shapes, values)
        hints.update({n: shapes[n] for n in filled if n not in sequence_outputs})
        if not _used_gaps(g, shapes):
            break
        folded = fold_shape_values(nodes, dtypes, shapes, values)
        if not folded and not filled:
            break
        done = set(folded)
        nodes = [n for n in nodes if not all(o in done for o in n.output if o)]
        inits = inits + [numpy_helper.from_array(np.asarray(v), name) for name, v in folded.items()]
    _fill_dropout_masks(g, dtypes, shapes)
    gaps = _used_gaps(g, shapes)
    if gaps and evaluate:
        _fill_by_evaluation(inferred, gaps, data_shapes, dtypes, shapes)
    fold_shape_values(list(g.node), dtypes, shapes, values)
    return Shapes(dtypes=dtypes, shapes=shapes, input_shapes=data_shapes, file_batch=max(int(file_batch), 1),
                  values=values)


def _onnx_type(dtype_name: str) -> int:
    """ONNX element type of a numpy dtype name (bfloat16, which numpy lacks, by name)."""
    if dtype_name == "bfloat16":
        return onnx.TensorProto.BFLOAT16
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype_name))


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        return model


def _read_value_infos(inferred: onnx.ModelProto, inits, dtypes: dict, shapes: dict) -> None:
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        if not vi.type.HasField("tensor_type"):
            continue
        dims = declared_dims(vi)
        shape = tuple(dims) if dims is not None and all(isinstance(d, int) for d in dims) else None
        if shape is not None or vi.name not in shapes:
            dtypes[vi.name] = np_dtype_name(elem_type(vi))
            shapes[vi.name] = shape
    for t in inits:
        dtypes[t.name] = np_dtype_name(t.data_type)
        shapes[t.name] = tuple(int(d) for d in t.dims)


_INT_TYPES = frozenset({onnx.TensorProto.INT32, onnx.TensorProto.INT64})
_FLOAT_BOOL_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                               onnx.TensorProto.BOOL})
_NO_FOLD = frozenset("RandomNormal RandomUniform RandomNormalLike RandomUniformLike Multinomial Loop If Scan".split())
_SMALL = 64


def fold_shape_values(nodes, dtypes: dict, shapes: dict, values: dict, use_shapes: bool = True) -> dict[str, np.ndarray]:
    """Evaluate small shape-arithmetic nodes (Shape of known shapes, then ops on small constants).

    `values` (name -> array) is extended in place; returns the newly computed values of node outputs.
    With ``use_shapes=False`` Shape/Size are not read, so only values fixed by the file's constants result.
    """
    from onnx.reference import ReferenceEvaluator

    new: dict[str, np.ndarray] = {}
    for n in nodes:
        outs = [o for o in n.output if o]
        if not outs or all(o in values for o in outs):
            continue
        if n.op_type in ("Shape", "Size"):
            shape = shapes.get(n.input[0]) if use_shapes else None
            if shape is None:
                continue
            if n.op_type == "Size":
                val = np.array(int(np.prod(shape)), dtype=np.int64)
            else:
                attrs = {a.name: a.i for a in n.attribute}
                val = np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))] if "end" in attrs
                               else shape[attrs.get("start", 0):], dtype=np.int64)
            values[outs[0]] = new[outs[0]] = val
            continue
        ins = [i for i in n.input if i]
        if all(dtypes.get(o, "").startswith(("float", "bfloat")) for o in outs) and n.op_type != "Cast":
            continue  # weights and masks, not shape arithmetic
        if n.op_type == "CastLike" and ins[0] in values and dtypes.get(ins[1]) and np.size(values[ins[0]]) <= _SMALL:
            values[outs[0]] = new[outs[0]] = np.asarray(values[ins[0]]).astype(dtypes[ins[1]])
            continue
        if n.op_type in _NO_FOLD or n.domain not in ("", "ai.onnx") or any(i not in values for i in ins):
            continue
        if any(np.size(values[i]) > _SMALL for i in ins):
            continue
        if n.op_type in ("ConstantOfShape", "Range", "Expand", "Tile") and not _small_result(n, values):
            continue
        try:
            graph = helper.make_graph([n], "fold", [], [helper.make_empty_tensor_value_info(o) for o in outs],
                                      initializer=[numpy_helper.from_array(np.asarray(values[i]), i) for i in ins])
            results = ReferenceEvaluator(helper.make_model(graph)).run(None, {})
        except Exception:
            continue
        for o, v in zip(outs, results):
            if isinstance(v, np.ndarray) and v.size <= _SMALL:
                values[o] = new[o] = v
    return new


def _small_result(n, values) -> bool:
    v = [np.asarray(values[i]) for i in n.input if i]
    try:
        if n.op_type == "ConstantOfShape":
            return int(np.prod(v[0])) <= _SMALL
        if n.op_type == "Expand":
            return int(np.prod(np.broadcast_shapes(v[0].shape, tuple(int(d) for d in v[1])))) <= _SMALL
        if n.op_type == "Tile":
            return int(np.prod(v[0].shape) * np.prod(v[1])) <= _SMALL
    except ValueError:
        return False
    start, limit, delta = (float(x) for x in v[:3])
    return delta != 0 and (limit - start) / delta <= _SMALL


def _fill_dropout_masks(g: onnx.GraphProto, dtypes: dict, shapes: dict) -> None:
    """Dropout's optional mask output has its data input's shape (bool); inference leaves it open in opset 9."""
    for n in g.node:
        if n.op_type == "Dropout" and len(n.output) > 1 and n.output[1] and shapes.get(n.output[1]) is None:
            shapes[n.output[1]] = shapes.get(n.input[0])
            dtypes[n.output[1]] = "bool"


def _used_gaps(g: onnx.GraphProto, shapes: dict) -> list[str]:
    used = {i for n in g.node for i in n.input if i} | {o.name for o in g.output}
    out = []
    for n in g.node:
        for o in n.output:
            if o and o in used and shapes.get(o) is None:
                out.append(o)
    return out


def _fill_by_evaluation(model: onnx.ModelProto, gaps: list[str], data_shapes: dict, dtypes: dict, shapes: dict) -> None:
    """Run the graph once on zeros and read the gap tensors' shapes (silently leaves them unknown on failure)."""
    from onnx.reference import ReferenceEvaluator

    m = onnx.ModelProto()
    m.CopyFrom(model)
    known_outputs = {o.name for o in m.graph.output}
    for name in gaps:
        if name not in known_outputs:
            m.graph.output.append(helper.make_empty_tensor_value_info(name))
    feeds = {}
    specs = []
    for vi in m.graph.input:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type(vi)))
        shape = data_shapes.get(vi.name) or tuple(declared_dims(vi) or ())
        specs.append((vi.name, shape, dt))
    if sum(int(np.prod(s)) * dt.itemsize for _, s, dt in specs) > _EVAL_FEED_LIMIT_BYTES:
        return  # weights too big to materialise for one evaluation: leave the gaps
    for name, shape, dt in specs:
        feeds[name] = np.zeros(shape, dtype=dt)
    try:
        names = [o.name for o in m.graph.output]
        results = ReferenceEvaluator(m).run(None, feeds)
    except Exception:
        return
    for name, value in zip(names, results):
        if name in gaps and isinstance(value, np.ndarray):
            shapes[name] = tuple(int(d) for d in value.shape)
            dtypes[name] = value.dtype.name


def constant_values(model: onnx.ModelProto, max_numel: int = 64, floats: bool = False) -> dict[str, np.ndarray]:
    """Values of small integer constants: initializers and Constant node outputs (shape targets and such).

    floats: also small float and bool constants (the scalars an exporter casts into shape arithmetic).
    """
    kinds = _INT_TYPES | (_FLOAT_BOOL_TYPES if floats else frozenset())
    out: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL and t.data_type in kinds and int(np.prod(t.dims or [1])) <= max_numel:
            out[t.name] = numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.t.data_type in kinds and int(np.prod(a.t.dims or [1])) <= max_numel:
                    out[n.output[0]] = numpy_helper.to_array(a.t)
                elif a.name in ("value_int", "value_ints"):
                    out[n.output[0]] = np.array(helper.get_attribute_value(a), dtype=np.int64)
    return out
