"""Input roles (DESIGN.md § Models): which graph inputs are data, which are parameters, which constants.

Data inputs are those named by ``--data-input``; without it, the non-initializer graph inputs whose leading
dim is symbolic; failing that, the first non-initializer input plus every other non-float one sharing its
leading dim (token ids and masks of a static-batch export). Every other float input and every float
initializer with more than one element is a parameter, and so is a one-element one that fills a weight or
bias slot (Gemm B/C, Conv W/B, a norm's scale/bias: a shape-[1] output bias is a weight like any other).
Integer/bool initializers and other one-element float initializers (exporter scalars such as ``sqrt(d)``)
are constants. A non-float input that is not data is an error naming it.

A module's float buffers (an additive attention mask, a rotary ``inv_freq``, BatchNorm running statistics) are
float initializers in an export, so the rule above would train them. The model's metadata entry
``tag.constants`` (a JSON list of initializer names; `mark_constants` writes it, e.g. from
``module.named_buffers()``) makes those initializers constants.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import onnx

from tag.errors import InputError

CONSTANTS_KEY = "tag.constants"  # model metadata: JSON list of float initializers that are constants, not parameters

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


@dataclass
class Roles:
    data: list[str]  # data inputs, in graph-input order
    params: list[str] = field(default_factory=list)  # float non-data inputs and float weight initializers
    constants: list[str] = field(default_factory=list)  # integer / scalar initializers


def elem_type(vi: onnx.ValueInfoProto) -> int:
    """The ONNX element type of a tensor value info (0 if not a tensor)."""
    return vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0


def declared_dims(vi: onnx.ValueInfoProto) -> list[int | str] | None:
    """Declared dims of a value info: ints where known, the dim_param (or '?') where symbolic; None if no shape."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def assign_roles(model: onnx.ModelProto, path: str, data_inputs=()) -> Roles:
    """Decide the role of every graph input and initializer (see the module docstring)."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    free = [vi for vi in g.input if vi.name not in inits]
    by_name = {vi.name: vi for vi in free}
    if data_inputs:
        for name in data_inputs:
            if name not in by_name:
                raise InputError(path, f"input '{name}'", "a graph input (not an initializer) named by --data-input",
                                 "no such input; inputs are " + ", ".join(sorted(by_name)[:8]))
        data = [vi.name for vi in free if vi.name in set(data_inputs)]
    else:
        data = [vi.name for vi in free if _symbolic_leading(vi)]
        if not data and free:
            anchor = free[0]
            dims = declared_dims(anchor)
            lead = dims[0] if dims else None
            data = [anchor.name] + [vi.name for vi in free[1:] if elem_type(vi) not in FLOAT_TYPES
                                    and declared_dims(vi) and declared_dims(vi)[0] == lead]
    if not data:
        raise InputError(path, "graph.input", "at least one data input (name it with --data-input NAME)", "none")
    roles = Roles(data=data)
    data_set = set(data)
    for vi in free:
        if vi.name in data_set:
            continue
        if elem_type(vi) not in FLOAT_TYPES:
            raise InputError(path, f"input '{vi.name}'", "a float parameter input, or a data input named by --data-input",
                             f"a non-float ({onnx.TensorProto.DataType.Name(elem_type(vi)) if elem_type(vi) else 'non-tensor'}) input that is not data")
        roles.params.append(vi.name)
    slots = _weight_slot_inputs(g)
    marked = marked_constants(model, path)
    for t in g.initializer:
        if t.data_type in FLOAT_TYPES and (_numel(t.dims) > 1 or t.name in slots) and t.name not in marked:
            roles.params.append(t.name)
        else:
            roles.constants.append(t.name)
    return roles


def marked_constants(model: onnx.ModelProto, path: str) -> set[str]:
    """The initializer names the model's ``tag.constants`` metadata lists (InputError naming the entry when it is
    not a JSON list of initializer names)."""
    raw = next((p.value for p in model.metadata_props if p.key == CONSTANTS_KEY), None)
    if raw is None:
        return set()
    where = f"metadata_props['{CONSTANTS_KEY}']"
    try:
        names = json.loads(raw)
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError(path, where, "a JSON list of initializer names", raw[:60])
    inits = {t.name for t in model.graph.initializer}
    missing = [n for n in names if n not in inits]
    if missing:
        raise InputError(path, where, "names of initializers of the model", repr(missing[0]))
    return set(names)


def mark_constants(model_path: str, names, out_path: str | None = None) -> list[str]:
    """Record `names` (initializers) as constants in the model's ``tag.constants`` metadata, so that tag neither
    trains them nor counts them as parameters; writes `out_path` (default: the model in place, atomically) and
    returns the names recorded (names that are not initializers of the file are skipped). Typical use, after
    ``torch.onnx.export(module, ..., "m.onnx")``: ``mark_constants("m.onnx", [n for n, b in
    module.named_buffers() if b.is_floating_point()])``; buffers the exporter folded away are skipped."""
    from tag.fileio import atomic_write

    model = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    keep = [n for n in dict.fromkeys(names) if n in inits]
    for p in list(model.metadata_props):
        if p.key == CONSTANTS_KEY:
            model.metadata_props.remove(p)
    model.metadata_props.add(key=CONSTANTS_KEY, value=json.dumps(keep))
    atomic_write(out_path or model_path, lambda f: f.write(model.SerializeToString()), binary=True)
    return keep


def _symbolic_leading(vi: onnx.ValueInfoProto) -> bool:
    dims = declared_dims(vi)
    return bool(dims) and isinstance(dims[0], str)


# op type -> input positions that hold weights or biases
WEIGHT_SLOTS = {"Gemm": (1, 2), "Conv": (1, 2), "ConvTranspose": (1, 2), "BatchNormalization": (1, 2),
                "LayerNormalization": (1, 2), "InstanceNormalization": (1, 2), "GroupNormalization": (1, 2)}


def _weight_slot_inputs(g: onnx.GraphProto) -> set[str]:
    """Names feeding a weight or bias slot of some node."""
    out = set()
    for node in g.node:
        for pos in WEIGHT_SLOTS.get(node.op_type, ()):
            if pos < len(node.input) and node.input[pos]:
                out.add(node.input[pos])
    return out


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n
