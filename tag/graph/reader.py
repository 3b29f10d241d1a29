"""Reading an ONNX file: parse, hash, inline local functions, and reject what tag cannot use.

Weights stay where they are: embedded initializers are parsed with the file, external-data
initializers are *not* loaded (their dims are enough; only small integer constants are ever read).
"""

from __future__ import annotations

import hashlib
import os

import onnx

from tag.errors import InputError, short_repr

# Domains whose ops tag knows how to read (ops without a cost rule are costed as memory-bound).
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")
MIN_OPSET = 9


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
    every node in a known domain (or a model-local function, which is inlined), and every node input
    defined by a graph input, an initializer or an earlier node output.
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
    return model


def node_label(node: onnx.NodeProto, index: int) -> str:
    """How errors name a node: ``node 'name' (OpType)``."""
    name = node.name or f"{node.op_type}_{index}"
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
    return f"node '{name}' ({op})"


def _check_nodes(path: str, graph: onnx.GraphProto) -> None:
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.name for t in graph.sparse_initializer}
    produced = {o for n in graph.node for o in n.output if o}
    for i, node in enumerate(graph.node):
        if node.domain not in KNOWN_DOMAINS:
            raise InputError(path, node_label(node, i),
                             "an op in a known domain (" + ", ".join(d or "ai.onnx" for d in KNOWN_DOMAINS[1:]) + ")",
                             f"domain '{node.domain}'")
        for name in node.input:
            if name and name not in defined and name not in produced:
                raise InputError(path, node_label(node, i), "inputs defined by a graph input, initializer or node",
                                 f"undefined input '{name}' (truncated or broken graph?)")
    if not graph.output:
        raise InputError(path, "graph.output", "at least one graph output", "none")
    for o in graph.output:
        if o.name not in produced and o.name not in defined:
            raise InputError(path, f"output '{o.name}'", "an output produced by a node or an input", "nothing produces it")
