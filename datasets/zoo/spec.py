"""ModelSpec: what datasets/build.py needs to know to build and export one zoo model (plain data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass(frozen=True)
class InputSpec:
    """One data input of a zoo model.

    shape is the example shape used at export; axis 0 is always the (symbolic) batch axis.
    dtype is "float32" or "int64"; integer inputs are drawn in [0, high).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    high: int = 0


@dataclass(frozen=True)
class ModelSpec:
    """A zoo model: its builder, its data inputs and how its weights are stored in the ONNX file.

    weights_as_inputs=True builds the module on the meta device and writes every float parameter and float
    buffer as a graph input without values (the file stays small); False builds it on the CPU with seeded
    weights and writes them as initializers.
    """

    name: str
    build: Callable[[], torch.nn.Module]
    inputs: tuple[InputSpec, ...]
    weights_as_inputs: bool
    description: str
    reference_params: int | None = None  # published parameter count the file should match (within 1%)
    notes: str = field(default="")
