"""Build-time passes over an ONNX graph for TorchProgram: node order, input roles, parameter initialisation.

Node order (the rule the graph loader uses too): a *stable* topological sort of ``graph.node`` — Kahn's
algorithm that always emits the ready node with the smallest index in the file, so a file already in
topological order keeps its order exactly.
"""

from __future__ import annotations

import hashlib
import math

import onnx
import torch

from tag.graph.toposort import stable_topological_order  # noqa: F401  (the shared node-order rule)

_PASS_THROUGH = {"Identity", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "CastLike"}
_SCALE_SLOTS = {"BatchNormalization": {1: "ones", 2: "zeros", 3: "zeros", 4: "ones"},
                "LayerNormalization": {1: "ones", 2: "zeros"},
                "InstanceNormalization": {1: "ones", 2: "zeros"},
                "GroupNormalization": {1: "ones", 2: "zeros"}}


def default_data_inputs(model: onnx.ModelProto, file_batch: int = 1) -> list[str]:
    """Data inputs by DESIGN.md's rule without a loader: non-initializer graph inputs whose leading dim is
    symbolic; failing that, those whose leading dim is the file's batch; failing that, the first one."""
    inits = {t.name for t in model.graph.initializer}
    free = [i for i in model.graph.input if i.name not in inits]
    symbolic = [i.name for i in free
                if i.type.tensor_type.shape.dim and not i.type.tensor_type.shape.dim[0].HasField("dim_value")]
    if symbolic:
        return symbolic
    batchy = [i.name for i in free if i.type.tensor_type.shape.dim and
              i.type.tensor_type.shape.dim[0].dim_value == file_batch]
    return batchy or [i.name for i in free[:1]]


def default_param_names(model: onnx.ModelProto, data_inputs: list[str]) -> list[str]:
    """Parameters by DESIGN.md's rule, from the one place that states it (`tag.graph.roles.assign_roles`): float
    initializers with more than one element or in a weight slot, and float non-data graph inputs, less the
    initializers the model's ``tag.constants`` metadata lists. Outputs of weight generators (ConstantOfShape, ...)
    are added by the constant-folding pass."""
    from tag.graph.roles import assign_roles

    return assign_roles(model, "<model>", data_inputs).params


def input_shape(model: onnx.ModelProto, name: str) -> tuple[int, ...] | None:
    """Static shape of a graph input from its type, None if any dim is symbolic or absent."""
    for i in model.graph.input:
        if i.name == name:
            dims = i.type.tensor_type.shape.dim
            if not all(d.HasField("dim_value") for d in dims):
                return None
            return tuple(d.dim_value for d in dims)
    return None


def _seed_for(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little") & (2**63 - 1)


def _init_kind(name: str, shape: tuple[int, ...], consumers: dict, nodes) -> tuple[str, int]:
    """('uniform', fan_in) | ('ones', 0) | ('zeros', 0) for a parameter, from how it is consumed."""
    frontier, seen = [name], set()
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        for node_idx, slot in consumers.get(t, []):
            n = nodes[node_idx]
            if n.op_type in _PASS_THROUGH and slot == 0:
                frontier.extend(o for o in n.output if o)
                continue
            if n.op_type in _SCALE_SLOTS:
                return _SCALE_SLOTS[n.op_type].get(slot, "zeros"), 0
            if n.op_type in ("Conv", "ConvTranspose"):
                return ("uniform", math.prod(shape[1:])) if slot == 1 else ("zeros", 0)
            if n.op_type == "Gemm" and slot < 2 and len(shape) == 2:
                trans = any(a.name == ("transB" if slot == 1 else "transA") and a.i for a in n.attribute)
                return "uniform", shape[1 - slot] if trans else shape[slot]
            if n.op_type == "MatMul" and len(shape) >= 2:
                return "uniform", shape[-2] if slot == 1 else shape[-1]
            if n.op_type == "Gather" and slot == 0:
                return "uniform", shape[-1] if shape else 1
            if n.op_type in ("Mul", "Div") and len(shape) <= 1:
                return "ones", 0
            if n.op_type in ("Add", "Sub", "Gemm") and len(shape) <= 1:
                return "zeros", 0
    if len(shape) >= 2:
        return "uniform", math.prod(shape[1:])
    return "zeros", 0


def fresh_parameter(model: onnx.ModelProto, name: str, shape: tuple[int, ...], seed: int,
                    consumers: dict, nodes) -> torch.Tensor:
    """A seeded fresh value for a weight stored as a graph input (no value in the file).

    Weights (read by Conv, Gemm, MatMul, Gather, or of rank >= 2): uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))
    with fan_in taken from how the consumer reads them (Conv: prod(shape[1:]); Gemm/MatMul: the contracted
    dim); norm scales and variances, and vectors multiplying activations: ones; biases, means and the rest:
    zeros. Deterministic in (seed, name), so every rank builds the same parameters independently.
    """
    kind, fan_in = _init_kind(name, shape, consumers, nodes)
    if kind == "ones":
        return torch.ones(shape)
    if kind == "zeros":
        return torch.zeros(shape)
    g = torch.Generator().manual_seed(_seed_for(seed, name))
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    return torch.empty(shape).uniform_(-bound, bound, generator=g)


def consumer_map(nodes) -> dict[str, list[tuple[int, int]]]:
    """tensor name -> [(node index, input slot)] over a node list."""
    out: dict[str, list[tuple[int, int]]] = {}
    for i, n in enumerate(nodes):
        for slot, name in enumerate(n.input):
            if name:
                out.setdefault(name, []).append((i, slot))
    return out
