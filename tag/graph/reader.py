"""Reading an ONNX file: parse, hash, inline local functions, and reject what tag cannot use.

Weights stay where they are: embedded initializers are parsed with the file, external-data
initializers are *not* loaded (their dims are enough; only small integer constants are ever read).
"""

from __future__ import annotations

import hashlib
import os

import onnx

from tag.errors import InputError, short_repr
from tag.graph.toposort import sort_graph_nodes

# Domains whose ops tag knows how to read (ops without a cost rule are costed as memory-bound).
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")
MIN_OPSET = 9
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})


def file_sha256(path: str) -> str:
    """Hex SHA-256 of the file's bytes (plan.json `model.sha256`)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_model(path: str) -> onnx.ModelProto:
    """Parse `path` into a ModelProto with local functions inlined; InputError on a bad file.

    Checks: the file exists and parses as ONNX, has a graph with nodes, a default-domain opset >= 9,
    every node in a known domain (or a model-local function, which is inlined), no control flow (If, Loop,
    Scan: their subgraphs cannot be costed per row), every node input defined by a graph input, an
    initializer or a node output, an acyclic graph, and every external-data file present and long enough.
    Nodes come back in stable topological order (tag.graph.toposort): files out of order are sorted.
    """
    path = str(path)
    if not os.path.isfile(path):
        raise InputError(path, "file", "an existing ONNX model file", "no such file")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # DecodeError, truncated protobuf, unreadable bytes
        raise InputError(path, "file", "an ONNX model (a serialized ModelProto)",
                         f"unparseable bytes ({short_repr(str(e).splitlines()[0] if str(e) else type(e).__name__)})") from None
    if not model.graph.node or not model.opset_import:
        raise InputError(path, "file", "an ONNX model with a graph of nodes and an opset_import",
                         f"{len(model.graph.node)} nodes and {len(model.opset_import)} opset imports")
    opsets = {o.domain: o.version for o in model.opset_import}
    default = opsets.get("", opsets.get("ai.onnx"))
    if default is not None and default < MIN_OPSET:
        raise InputError(path, "opset_import", f"default-domain opset {MIN_OPSET} or newer", str(default))
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:
            raise InputError(path, "functions", "model-local functions that can be inlined",
                             short_repr(str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
    _check_nodes(path, model.graph)
    _check_schemas(path, model.graph, default or 1)
    _check_initializers(path, model.graph)
    _check_external_data(path, model.graph)
    sort_graph_nodes(model.graph, path)
    return model


def node_label(node: onnx.NodeProto, index: int) -> str:
    """How errors name a node: ``node 'name' (OpType)``."""
    name = node.name or f"{node.op_type}_{index}"
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
    return f"node '{name}' ({op})"


def _check_text(path: str, graph: onnx.GraphProto) -> None:
    """Names, op types, domains and string attributes are UTF-8 text (protobuf hands back bytes otherwise)."""
    for kind, items in (("input", graph.input), ("output", graph.output), ("initializer", graph.initializer)):
        for k, item in enumerate(items):
            if not isinstance(item.name, str):
                raise InputError(path, f"graph.{kind}[{k}]", "a UTF-8 name", short_repr(item.name))
    for i, node in enumerate(graph.node):
        fields = [node.op_type, node.domain, node.name, *node.input, *node.output, *(a.name for a in node.attribute)]
        bad = next((f for f in fields if not isinstance(f, str)), None)
        if bad is None:
            for a in node.attribute:
                try:
                    a.s.decode("utf-8")
                except UnicodeDecodeError:
                    bad = a.s
        if bad is not None:
            raise InputError(path, f"graph.node[{i}]", "UTF-8 names, op type, domain and string attributes",
                             short_repr(bad))


def _check_nodes(path: str, graph: onnx.GraphProto) -> None:
    _check_text(path, graph)
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.name for t in graph.sparse_initializer}
    produced = {o for n in graph.node for o in n.output if o}
    for i, node in enumerate(graph.node):
        if node.domain not in KNOWN_DOMAINS:
            raise InputError(path, node_label(node, i),
                             "an op in a known domain (" + ", ".join(d or "ai.onnx" for d in KNOWN_DOMAINS[1:]) + ")",
                             f"domain '{node.domain}'")
        subgraphs = [a.name for a in node.attribute if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)]
        if node.op_type in CONTROL_FLOW_OPS or subgraphs:
            raise InputError(path, node_label(node, i),
                             "a graph without control flow (If/Loop/Scan subgraphs cannot be costed per row; "
                             "export with the condition or loop unrolled)",
                             f"a {node.op_type} node with subgraph attribute(s) {', '.join(subgraphs) or 'none'}")
        for name in node.input:
            if name and name not in defined and name not in produced:
                raise InputError(path, node_label(node, i), "inputs defined by a graph input, initializer or node",
                                 f"undefined input '{name}' (truncated or broken graph?)")
    if not graph.output:
        raise InputError(path, "graph.output", "at least one graph output", "none")
    for o in graph.output:
        if o.name not in produced and o.name not in defined:
            raise InputError(path, f"output '{o.name}'", "an output produced by a node or an input", "nothing produces it")


def _check_external_data(path: str, graph: onnx.GraphProto) -> None:
    """Every external-data initializer's file exists beside the model and holds offset + length bytes."""
    base = os.path.dirname(os.path.abspath(path))
    for t in graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        where = f"initializer '{t.name}'"
        location = info.get("location", "")
        if not location:
            raise InputError(path, where, "external data with a 'location' entry", "no location")
        full = os.path.normpath(os.path.join(base, location))
        if os.path.isabs(location) or not full.startswith(base + os.sep):
            raise InputError(path, where, "an external-data location inside the model's directory", repr(location))
        if not os.path.isfile(full):
            raise InputError(path, where, f"its external-data file '{location}' beside the model", "no such file")
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError:
            raise InputError(path, where, "integer external-data offset and length",
                             short_repr((info.get("offset"), info.get("length")))) from None
        size = os.path.getsize(full)
        if offset < 0 or (length is not None and (length < 0 or offset + length > size)) or offset > size:
            raise InputError(path, where, f"offset + length within '{location}' ({size} bytes)",
                             f"offset {offset}, length {length}")


_ATTR_TYPE_NAMES = {v: k for k, v in onnx.AttributeProto.AttributeType.items()}


def _check_schemas(path: str, graph: onnx.GraphProto, opset: int) -> None:
    """Default-domain nodes match their op schema: input and output counts, attribute types, required attributes."""
    for i, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except Exception:  # unknown op type: costed as memory-bound (a warning), not checked here
            continue
        n_in = len(node.input)
        while n_in and not node.input[n_in - 1]:
            n_in -= 1
        if not schema.min_input <= n_in <= schema.max_input:
            raise InputError(path, node_label(node, i), f"{_arity(schema.min_input, schema.max_input)} inputs "
                             f"for {node.op_type} (opset {opset})", str(n_in))
        if not schema.min_output <= len(node.output) <= schema.max_output:
            raise InputError(path, node_label(node, i), f"{_arity(schema.min_output, schema.max_output)} outputs "
                             f"for {node.op_type} (opset {opset})", str(len(node.output)))
        for a in node.attribute:
            spec = schema.attributes.get(a.name)
            if spec is not None and int(a.type) != int(spec.type):
                raise InputError(path, f"{node_label(node, i)} attribute '{a.name}'",
                                 f"type {_ATTR_TYPE_NAMES.get(int(spec.type), spec.type)}",
                                 _ATTR_TYPE_NAMES.get(int(a.type), str(a.type)))
        given = {a.name for a in node.attribute}
        for name, spec in schema.attributes.items():
            if spec.required and name not in given:
                raise InputError(path, node_label(node, i), f"the required attribute '{name}'", "none")


def _arity(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else (f"at least {lo}" if hi > 1 << 20 else f"{lo} to {hi}")


_FIELD_OF_TYPE = {onnx.TensorProto.FLOAT: "float_data", onnx.TensorProto.DOUBLE: "double_data",
                  onnx.TensorProto.INT64: "int64_data", onnx.TensorProto.UINT64: "uint64_data",
                  onnx.TensorProto.UINT32: "uint64_data", onnx.TensorProto.STRING: "string_data"}


def _check_initializers(path: str, graph: onnx.GraphProto) -> None:
    """Embedded initializers: a known element type, dims >= 0, and as many stored values as the dims say."""
    valid_types = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    for t in graph.initializer:
        where = f"initializer '{t.name}'"
        if t.data_type not in valid_types:
            raise InputError(path, where, "a known ONNX element type", str(t.data_type))
        if any(d < 0 for d in t.dims):
            raise InputError(path, where, "dims >= 0", short_repr(list(t.dims)))
        if t.data_location == onnx.TensorProto.EXTERNAL:
            continue
        numel = 1
        for d in t.dims:
            numel *= int(d)
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except Exception:
            continue  # packed 4-bit and other exotic types: left to the reader of the values
        if t.HasField("raw_data"):
            stored, expected = len(t.raw_data), numel * itemsize
            unit = "bytes"
        else:
            field = _FIELD_OF_TYPE.get(t.data_type, "int32_data")
            stored = len(getattr(t, field))
            expected = numel * (2 if t.data_type == onnx.TensorProto.COMPLEX64 else 1)
            if t.data_type == onnx.TensorProto.COMPLEX128:
                stored, expected = len(t.double_data), 2 * numel
            unit = "values"
        if stored != expected:
            raise InputError(path, where, f"{expected} stored {unit} for dims {list(t.dims)}", f"{stored}")
