"""Export a zoo ModelSpec to an ONNX ModelProto with the dynamo exporter and a symbolic batch axis."""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnx_ir
import torch

from .cleanup import drop_zero_conv_bias, fold_constant_nodes
from .spec import ModelSpec

OPSET = 20
FLOAT_TYPES = (onnx_ir.DataType.FLOAT, onnx_ir.DataType.FLOAT16, onnx_ir.DataType.BFLOAT16,
               onnx_ir.DataType.DOUBLE)


def register_int_constant(module: torch.nn.Module, name: str, values) -> None:
    """Register an integer buffer whose values survive a meta-device build.

    On the meta device a buffer has no data; the values are remembered on the module (as a plain
    numpy array) and written back into the exported initializer of the same name by export_spec.
    """
    array = np.asarray(values, dtype=np.int64)
    module.register_buffer(name, torch.as_tensor(array), persistent=False)
    if not hasattr(module, "_zoo_int_values"):
        module._zoo_int_values = {}
    module._zoo_int_values[name] = array


def _int_constants(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """Fully qualified buffer name -> values, for every buffer registered with register_int_constant."""
    found = {}
    for prefix, sub in model.named_modules():
        for name, array in getattr(sub, "_zoo_int_values", {}).items():
            found[f"{prefix}.{name}" if prefix else name] = array
    return found


def example_inputs(spec: ModelSpec, device: str, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Example inputs for export: batch rows (axis 0), zeros (values do not matter to the trace)."""
    out = []
    for inp in spec.inputs:
        shape = (batch,) + tuple(inp.shape[1:])
        dtype = torch.int64 if inp.dtype == "int64" else torch.float32
        out.append(torch.zeros(shape, dtype=dtype, device=device))
    return tuple(out)


def export_spec(spec: ModelSpec, seed: int = 0) -> tuple[onnx.ModelProto, float]:
    """Build spec's module, export it (dynamo, optimize=False, opset OPSET) and return (model, seconds).

    Every data input gets the symbolic dim "batch" on axis 0. With spec.weights_as_inputs, float
    initializers become graph inputs without values (after the data inputs) and integer constants get
    their remembered values back. Zero biases synthesised for bias-free Conv layers are dropped and small all-constant
    subgraphs (shape and axis vectors) are folded into Constant nodes (both exact).
    """
    start = time.perf_counter()
    device = "meta" if spec.weights_as_inputs else "cpu"
    torch.manual_seed(seed)
    with torch.device(device):
        model = spec.build()
    model.eval()
    batch = torch.export.Dim("batch")
    args = example_inputs(spec, device)
    program = torch.onnx.export(
        model, args, dynamo=True, optimize=False, opset_version=OPSET, verbose=False,
        input_names=[i.name for i in spec.inputs],
        dynamic_shapes=tuple({0: batch} for _ in spec.inputs),
    )
    ir_model = program.model
    graph = ir_model.graph
    if spec.weights_as_inputs:
        ints = _int_constants(model)
        state = {name for name, _ in model.named_parameters()} | {name for name, _ in model.named_buffers()}
        for name in list(graph.initializers):
            value = graph.initializers[name]
            if value.dtype in FLOAT_TYPES:
                if name not in state:
                    raise ValueError(f"{spec.name}: float constant {name!r} is not a parameter or buffer "
                                     "(its values would be lost on the meta device)")
                graph.initializers.pop(name)
                value.const_value = None
                graph.inputs.append(value)
            elif name in ints:
                value.const_value = onnx_ir.tensor(ints[name], name=name)
            else:
                raise ValueError(f"{spec.name}: integer initializer {name!r} has no recorded values; "
                                 "register it with register_int_constant")
    for value, inp in zip(graph.inputs, spec.inputs):
        value.shape = onnx_ir.Shape(["batch"] + list(value.shape.dims[1:]))
    proto = onnx_ir.serde.serialize_model(ir_model)
    drop_zero_conv_bias(proto)
    fold_constant_nodes(proto)
    proto.producer_name = "tag datasets/build.py"
    proto.doc_string = spec.description
    return proto, time.perf_counter() - start
