"""Hand-made graph and cluster shared by the strategy tests."""

from tag.graph.opgraph import Op, OpGraph, TensorInfo

TOPO = {"version": 1, "machines": [
    {"name": "m0", "devices": [{"type": "V100-16GB", "count": 2}], "nic_bandwidth_gbps": 100},
    {"name": "m1", "devices": [{"type": "GTX1080Ti-11GB", "count": 2}], "nic_bandwidth_gbps": 50}]}


def tiny_graph(batch=8):
    """x -> MatMul(W1) -> h -> Relu -> r -> MatMul(W2) -> y; per row 16 floats between ops."""
    t = {
        "x": TensorInfo("x", "float32", (1, 16), 0, "data", None, [0]),
        "W1": TensorInfo("W1", "float32", (16, 16), None, "param", None, [0]),
        "h": TensorInfo("h", "float32", (1, 16), 0, "activation", 0, [1]),
        "r": TensorInfo("r", "float32", (1, 16), 0, "activation", 1, [2]),
        "W2": TensorInfo("W2", "float32", (16, 4), None, "param", None, [2]),
        "y": TensorInfo("y", "float32", (1, 4), 0, "activation", 2, []),
    }
    ops = [
        Op("mm1", "MatMul", "", ["x", "W1"], ["h"], "matmul", fwd_flops_per_row=512, params=["W1"],
           param_count=256, param_bytes=1024, saved_bytes_per_row=64),
        Op("relu", "Relu", "", ["h"], ["r"], "elementwise", fwd_flops_per_row=16, saved_bytes_per_row=64),
        Op("mm2", "MatMul", "", ["r", "W2"], ["y"], "matmul", fwd_flops_per_row=128, params=["W2"],
           param_count=64, param_bytes=256, saved_bytes_per_row=64),
    ]
    return OpGraph("tiny.onnx", ops, t, ["x"], ["W1", "W2"], ["y"], file_batch=1, batch_size=batch)
