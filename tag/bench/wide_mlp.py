"""A wide MLP with one huge layer, written as ONNX for the sharding benchmark and tests (issue 22).

x[B, f0] -> Gemm f0 x f1 -> Relu -> Gemm f1 x f2 -> Relu -> ... -> Gemm f(n-1) x fn, fp32, with a symbolic batch and
the weights as graph inputs without values (deploy seeds them), so a 1 GB layer costs nothing to write.
"""

from __future__ import annotations


def write_wide_mlp(path: str, features: tuple[int, ...]) -> None:
    """Write the MLP of `features` (len >= 2; Gemm i maps features[i] to features[i + 1], weight [out, in] with
    transB = 1, named `i.weight` / `i.bias`) to `path`."""
    import onnx
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features[0]])]
    nodes, prev = [], "x"
    for i, (fin, fout) in enumerate(zip(features, features[1:])):
        w, b, y = f"{i}.weight", f"{i}.bias", f"linear_{i}"
        inputs += [helper.make_tensor_value_info(w, TensorProto.FLOAT, [fout, fin]),
                   helper.make_tensor_value_info(b, TensorProto.FLOAT, [fout])]
        nodes.append(helper.make_node("Gemm", [prev, w, b], [y], name=f"gemm_{i}", transB=1))
        prev = y
        if i < len(features) - 2:
            nodes.append(helper.make_node("Relu", [y], [f"relu_{i}"], name=f"relu_{i}"))
            prev = f"relu_{i}"
    out = helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", features[-1]])
    model = helper.make_model(helper.make_graph(nodes, "wide_mlp", inputs, [out]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
