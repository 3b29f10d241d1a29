"""The OpGraph: ops of one ONNX model with shapes, batch axes and per-op costs (plain data).

All row-dependent figures are per batch row; a figure for r rows is ``per_row * r + fixed``.
FLOP = 2 x MAC for products. Bytes are bytes. Ops are stored in a topological order.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TensorInfo:
    name: str
    dtype: str  # numpy dtype name: "float32", "int64", ...
    shape: tuple[int, ...] | None  # at the file's batch (1 where symbolic); None if unknown
    batch_axis: int | None = None  # axis that carries batch rows, None if not batched
    role: str = "activation"  # "data" | "param" | "constant" | "activation"
    producer: int | None = None  # op index, None for graph inputs / initializers
    consumers: list[int] = field(default_factory=list)

    @property
    def itemsize(self) -> int:
        return {"float64": 8, "int64": 8, "uint64": 8, "float32": 4, "int32": 4, "uint32": 4,
                "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1,
                "bool": 1}.get(self.dtype, 4)

    @property
    def numel(self) -> int | None:
        if self.shape is None:
            return None
        n = 1
        for d in self.shape:
            n *= d
        return n

    def bytes_per_row(self, file_batch: int) -> float:
        """Bytes of this tensor per batch row (0 if not batched)."""
        if self.batch_axis is None or self.numel is None:
            return 0.0
        return self.numel * self.itemsize / max(file_batch, 1)

    def bytes_fixed(self) -> float:
        """Bytes of this tensor if it is not batched (0 if batched)."""
        if self.batch_axis is not None or self.numel is None:
            return 0.0
        return float(self.numel * self.itemsize)


@dataclass
class Op:
    """One ONNX node with its costs.

    op_class groups op types that share a roofline efficiency: "conv", "matmul", "norm", "elementwise",
    "reduce", "pool", "softmax", "gather", "data_movement", "shape", "other".
    """

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    op_class: str = "other"
    splittable: bool = True  # can rows of this op be computed on different devices?
    batched: bool = True  # does any output carry the batch axis?
    fwd_flops_per_row: float = 0.0
    fwd_flops_fixed: float = 0.0
    bwd_flops_per_row: float = 0.0  # input-gradient + weight-gradient FLOPs
    bwd_flops_fixed: float = 0.0
    mem_bytes_per_row: float = 0.0  # memory traffic of forward (activations read + written), per row
    mem_bytes_fixed: float = 0.0  # memory traffic that does not scale with rows (weights read)
    params: list[str] = field(default_factory=list)  # names of parameter tensors this op consumes
    param_count: int = 0  # elements of parameters first consumed by this op (shared params counted once)
    param_bytes: float = 0.0
    out_bytes_per_row: float = 0.0  # bytes of batched outputs per row
    out_bytes_fixed: float = 0.0
    saved_bytes_per_row: float = 0.0  # bytes kept for backward per row
    saved_bytes_fixed: float = 0.0
    is_weight_generator: bool = False  # part of a subgraph computing a parameter (not compute)
    attrs: dict = field(default_factory=dict)


@dataclass
class BatchConstant:
    """A constant (initializer or Constant node output) whose value encodes the file's batch.

    Deploy rewrites ``value[index]`` from ``file_batch`` (or a multiple) to rows x (value / file_batch).
    """

    tensor: str
    index: int
    value: int


@dataclass
class OpGraph:
    """A loaded model.

    ops: in topological order; tensors: every named tensor; data_inputs / param_names: the input roles;
    file_batch: the batch the shapes were completed at (1 where the batch dim is symbolic);
    batch_size: the global batch used for planning (DESIGN.md § Batch).
    """

    path: str
    ops: list[Op]
    tensors: dict[str, TensorInfo]
    data_inputs: list[str]
    param_names: list[str]
    outputs: list[str]
    file_batch: int
    batch_size: int
    batch_constants: list[BatchConstant] = field(default_factory=list)
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # from --input-shape
    sha256: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def param_count(self) -> int:
        return sum(op.param_count for op in self.ops)

    @property
    def param_bytes(self) -> float:
        return sum(op.param_bytes for op in self.ops)

    def op_index(self) -> dict[str, int]:
        return {op.name: i for i, op in enumerate(self.ops)}
