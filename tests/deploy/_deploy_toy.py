"""A hand-written toy model behind the TorchProgram interface, for deploy tests without the ONNX converter.

The graph is an OpGraph built by hand; `ToyProgram` runs its ops with plain torch. It covers a skip
connection, a tied weight (W1 in two Gemms), a parameter-derived unbatched tensor sent between groups
(Transpose of W3), Gemm with transB, MatMul, and two float outputs.
"""

from __future__ import annotations

import math

import torch

from tag.graph.opgraph import Op, OpGraph, TensorInfo

# name, op_type, inputs, outputs, attrs
TOY_OPS = [
    ("g1", "Gemm", ["x", "W1", "b1"], ["h1"], {"transB": 1}),
    ("r1", "Relu", ["h1"], ["a1"], {}),
    ("t3", "Transpose", ["W3"], ["W3t"], {"perm": [1, 0]}),
    ("m2", "MatMul", ["a1", "W2"], ["h2"], {}),
    ("th", "Tanh", ["h2"], ["a2"], {}),
    ("g3", "Gemm", ["a2", "W3t"], ["h3"], {"alpha": 0.5}),
    ("add", "Add", ["h3", "a1"], ["s"], {}),
    ("g4", "Gemm", ["s", "W4", "b4"], ["y"], {"transB": 1}),
    ("g5", "Gemm", ["a2", "W1"], ["z"], {"transB": 1}),
    ("r5", "Relu", ["z"], ["y2"], {}),
]
# unbatched shapes for params, per-row shapes for activations
TOY_PARAMS = {"W1": (16, 8), "b1": (16,), "W2": (16, 8), "W3": (16, 8), "W4": (4, 16), "b4": (4,)}
TOY_ACTS = {"x": (8,), "h1": (16,), "a1": (16,), "h2": (8,), "a2": (8,), "h3": (16,), "s": (16,),
            "y": (4,), "z": (16,), "y2": (16,)}
# groups used by the tests: op indices
TOY_GROUPS = [[0, 1, 2], [3, 4], [5, 6], [7, 8, 9]]


def toy_graph(batch: int) -> OpGraph:
    """The toy OpGraph at global batch `batch` (file batch 1)."""
    tensors: dict[str, TensorInfo] = {}
    for n, shp in TOY_PARAMS.items():
        tensors[n] = TensorInfo(n, "float32", shp, None, "param")
    for n, shp in TOY_ACTS.items():
        tensors[n] = TensorInfo(n, "float32", (1,) + shp, 0, "data" if n == "x" else "activation")
    tensors["W3t"] = TensorInfo("W3t", "float32", (8, 16), None, "activation")
    ops, counted = [], set()
    for i, (name, typ, ins, outs, attrs) in enumerate(TOY_OPS):
        prm = [t for t in ins if t in TOY_PARAMS]
        first = [t for t in prm if t not in counted]  # a parameter's size counts at its first consumer
        counted.update(first)
        count = sum(math.prod(TOY_PARAMS[t]) for t in first)
        ops.append(Op(name, typ, "", list(ins), list(outs), params=prm, attrs=dict(attrs),
                      param_count=count, param_bytes=4.0 * count))  # float32
        for t in ins:
            tensors[t].consumers.append(i)
        for t in outs:
            tensors[t].producer = i
    return OpGraph("toy", ops, tensors, ["x"], list(TOY_PARAMS), ["y", "y2"], 1, batch)


class ToyProgram:
    """run_ops/param/param_names over `toy_graph`, parameters seeded by `seed`."""

    def __init__(self, graph: OpGraph, seed: int = 0):
        self.graph = graph
        gen = torch.Generator().manual_seed(seed)
        self._params = {n: (0.4 * torch.randn(s, generator=gen)).requires_grad_(True) for n, s in TOY_PARAMS.items()}
        self.param_names = list(TOY_PARAMS)

    def param(self, name: str) -> torch.Tensor:
        return self._params[name]

    def run_ops(self, op_ids, env, rows):
        for i in op_ids:
            op = self.graph.ops[i]
            a = [env[t] if t in env else self._params[t] for t in op.inputs]
            at = op.attrs
            if op.op_type == "Gemm":
                b = a[1].t() if at.get("transB", 0) else a[1]
                y = at.get("alpha", 1.0) * (a[0] @ b)
                if len(a) > 2:
                    y = y + at.get("beta", 1.0) * a[2]
            elif op.op_type == "MatMul":
                y = torch.matmul(a[0], a[1])
            elif op.op_type == "Relu":
                y = torch.relu(a[0])
            elif op.op_type == "Tanh":
                y = torch.tanh(a[0])
            elif op.op_type == "Add":
                y = a[0] + a[1]
            elif op.op_type == "Transpose":
                y = a[0].permute(*at["perm"])
            else:
                raise NotImplementedError(op.op_type)
            env[op.outputs[0]] = y
        return env
