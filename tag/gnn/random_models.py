"""Random ONNX models for training the structure network: a model is a function of its seed only.

Three families, drawn by the seed, each with a symbolic batch and its weights as graph inputs without values
(deploy seeds them; `tag.bench.wide_mlp` does the same), so a 1 GB layer costs nothing to write:

    mlp          x[B, f0] -> (Gemm f_i x f_(i+1) -> Relu) x L, widths drawn from 256 .. 8192 (parameter heavy:
                 gradient sync dominates on slow links, so ZeRO, subsets, placement and pipelines matter)
    cnn          x[B, c0, s, s] -> (Conv 3x3 -> Relu, stride 2 every few layers) x L -> GlobalAveragePool ->
                 Flatten -> Gemm (compute heavy, few parameters: data parallelism pays)
    transformer  x[B, T, d] -> L blocks of single-head attention (Q K^T / sqrt d -> Softmax -> V, output
                 projection, residual Add) and a ReLU MLP of width 4d with its residual Add (both regimes)

These are never the datasets/ models nor the onnx wheel's light zoo graphs (those stay unseen test models).
"""

from __future__ import annotations

import random

FAMILIES = ("mlp", "cnn", "transformer")


def random_model(seed: int) -> tuple[str, object]:
    """(family, onnx.ModelProto) of `seed` (deterministic)."""
    rng = random.Random(seed)
    family = FAMILIES[rng.randrange(len(FAMILIES))]
    build = {"mlp": _mlp, "cnn": _cnn, "transformer": _transformer}[family]
    return family, build(rng, f"random_{family}_{seed}")


def write_random_model(seed: int, path: str) -> str:
    """Write the model of `seed` to `path`; returns its family."""
    import onnx

    family, model = random_model(seed)
    onnx.save(model, path)
    return family


class _Builder:
    """Nodes, weight inputs and a running tensor name for one graph."""

    def __init__(self, name: str):
        from onnx import TensorProto, helper

        self.helper, self.FLOAT = helper, TensorProto.FLOAT
        self.name, self.nodes, self.inputs, self.n = name, [], [], 0

    def data(self, shape: list) -> str:
        self.inputs.append(self.helper.make_tensor_value_info("x", self.FLOAT, shape))
        return "x"

    def weight(self, shape: list[int]) -> str:
        w = f"w{len(self.inputs)}"
        self.inputs.append(self.helper.make_tensor_value_info(w, self.FLOAT, shape))
        return w

    def op(self, op_type: str, ins: list[str], **attrs) -> str:
        self.n += 1
        out = f"t{self.n}"
        self.nodes.append(self.helper.make_node(op_type, ins, [out], name=f"{op_type.lower()}_{self.n}", **attrs))
        return out

    def model(self, out: str, out_shape: list):
        h = self.helper
        graph = h.make_graph(self.nodes, self.name, self.inputs, [h.make_tensor_value_info(out, self.FLOAT, out_shape)])
        return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _mlp(rng: random.Random, name: str):
    b = _Builder(name)
    widths = [rng.choice((256, 512, 1024, 2048, 4096, 8192)) for _ in range(rng.randint(3, 8))]
    x = b.data(["batch", widths[0]])
    for i, (fin, fout) in enumerate(zip(widths, widths[1:])):
        x = b.op("Gemm", [x, b.weight([fout, fin]), b.weight([fout])], transB=1)
        if i < len(widths) - 2:
            x = b.op("Relu", [x])
    return b.model(x, ["batch", widths[-1]])


def _cnn(rng: random.Random, name: str):
    b = _Builder(name)
    size, c = rng.choice((32, 64, 96, 128)), 3
    x = b.data(["batch", 3, size, size])
    for i in range(rng.randint(3, 9)):
        cout = rng.choice((16, 32, 64, 128, 256, 512))
        stride = 2 if size > 8 and rng.random() < 0.35 else 1
        x = b.op("Conv", [x, b.weight([cout, c, 3, 3]), b.weight([cout])], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                 strides=[stride, stride])
        x = b.op("Relu", [x])
        size, c = (size + 1) // stride if stride > 1 else size, cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    classes = rng.choice((10, 100, 1000))
    x = b.op("Gemm", [x, b.weight([classes, c]), b.weight([classes])], transB=1)
    return b.model(x, ["batch", classes])


def _transformer(rng: random.Random, name: str):
    b = _Builder(name)
    t, d = rng.choice((32, 64, 128, 256)), rng.choice((128, 256, 512, 768, 1024))
    x = b.data(["batch", t, d])
    scale = b.weight([1])  # the 1 / sqrt(d) score scale, a learnable scalar here
    for _ in range(rng.randint(1, 6)):
        q = b.op("MatMul", [x, b.weight([d, d])])
        k = b.op("MatMul", [x, b.weight([d, d])])
        v = b.op("MatMul", [x, b.weight([d, d])])
        s = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 2, 1])]), scale])
        o = b.op("MatMul", [b.op("MatMul", [b.op("Softmax", [s], axis=-1), v]), b.weight([d, d])])
        x = b.op("Add", [x, o])
        hdn = b.op("Relu", [b.op("MatMul", [x, b.weight([d, 4 * d])])])
        x = b.op("Add", [x, b.op("MatMul", [hdn, b.weight([4 * d, d])])])
    return b.model(x, ["batch", t, d])
