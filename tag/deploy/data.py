"""Synthetic training data: a function of (seed, global batch) only (DESIGN.md § Training semantics).

The full global batch is generated deterministically in one fixed order (data inputs in graph order,
then a target for every float graph output), so every rank and every plan sees the same numbers and
slices its own rows. Float inputs and targets are standard normal; integer inputs are uniform in
[0, table rows) of the Gather table they index, else in [0, 2); bool inputs are uniform.
"""

from __future__ import annotations

import numpy as np
import torch

from tag.graph.opgraph import OpGraph


def torch_dtype(numpy_name: str) -> torch.dtype:
    """The torch dtype of a numpy dtype name (as in TensorInfo.dtype)."""
    if numpy_name == "bfloat16":
        return torch.bfloat16
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(numpy_name))).dtype


def batch_shape(graph: OpGraph, name: str, batch_size: int) -> tuple[int, ...]:
    """Shape of tensor `name` at the global batch (its batch axis scaled from the file's batch)."""
    info = graph.tensors[name]
    if info.shape is None:
        raise ValueError(f"tensor {name!r} has no known shape")
    shape = list(info.shape)
    if info.batch_axis is not None:
        shape[info.batch_axis] = shape[info.batch_axis] // max(graph.file_batch, 1) * batch_size
    return tuple(shape)


def int_high(graph: OpGraph, name: str) -> int:
    """Exclusive upper bound for integer input `name`: rows of the Gather table it indexes, else 2."""
    for i in graph.tensors[name].consumers:
        op = graph.ops[i]
        if op.op_type == "Gather" and len(op.inputs) > 1 and op.inputs[1] == name:
            table = graph.tensors.get(op.inputs[0])
            if table is not None and table.shape:
                return int(table.shape[int(op.attrs.get("axis", 0))])
    return 2


def synthetic_batch(graph: OpGraph, batch_size: int, seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(data inputs, targets) for the whole global batch, from `seed` and `batch_size` only."""
    gen = torch.Generator().manual_seed(int(seed))
    data: dict[str, torch.Tensor] = {}
    for name in graph.data_inputs:
        dtype = torch_dtype(graph.tensors[name].dtype)
        shape = batch_shape(graph, name, batch_size)
        if dtype.is_floating_point:
            data[name] = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            data[name] = torch.randint(0, 2, shape, generator=gen).bool()
        else:
            data[name] = torch.randint(0, int_high(graph, name), shape, generator=gen).to(dtype)
    targets: dict[str, torch.Tensor] = {}
    for name in graph.outputs:
        dtype = torch_dtype(graph.tensors[name].dtype)
        if dtype.is_floating_point:
            targets[name] = torch.randn(batch_shape(graph, name, batch_size), generator=gen, dtype=torch.float32).to(dtype)
    return data, targets


def make_optimizer(name: str, lr: float):
    """A factory params -> torch optimizer: sgd, momentum (SGD, momentum 0.9) or adam (betas 0.9, 0.999)."""
    if name == "sgd":
        return lambda ps: torch.optim.SGD(ps, lr=lr)
    if name == "momentum":
        return lambda ps: torch.optim.SGD(ps, lr=lr, momentum=0.9)
    if name == "adam":
        return lambda ps: torch.optim.Adam(ps, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}")
