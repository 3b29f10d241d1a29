"""Execute ONNX models in PyTorch (issue 11): the converter that deploy and op profiling run on.

>>> from tag.deploy.onnx_torch import TorchProgram            # doctest: +SKIP
>>> prog = TorchProgram(onnx.load("m.onnx"), graph, seed=0)   # doctest: +SKIP
>>> env = prog.run_ops(group.op_ids, {"x": x_rows}, rows=3)    # doctest: +SKIP
"""

from tag.deploy.onnx_torch.build import stable_topological_order
from tag.deploy.onnx_torch.program import TorchProgram, rewrite_batch_constant
from tag.deploy.onnx_torch.registry import CONVERTERS

SUPPORTED_OPS = tuple(sorted(CONVERTERS))

__all__ = ["TorchProgram", "stable_topological_order", "rewrite_batch_constant", "CONVERTERS", "SUPPORTED_OPS"]
