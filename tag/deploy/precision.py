"""How a deployed step computes under the plan's ``training.precision`` (docs/plan.md § memory and precision).

* ``fp32``: plain fp32.
* ``tf32``: fp32 storage; on CUDA ranks matmuls and convolutions may use TF32 tensor cores
  (``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32``); on CPU ranks it is fp32.
* ``bf16`` / ``fp16``: autocast (``torch.autocast(device, dtype)``) around each group's compute: matmuls and
  convolutions run in the 16-bit type, weights, their gradients and the optimizer states stay fp32 (master
  weights). Float activations cross ranks in the 16-bit type (`wire_dtype`), both ways. fp16 adds dynamic loss
  scaling (`LossScaler`); bf16 needs none.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from tag.strategy.memory_decisions import MIXED_PRECISIONS

_HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """The compute settings of `name` on `device_type` ("cpu" or "cuda")."""

    name: str = "fp32"
    device_type: str = "cpu"

    @property
    def mixed(self) -> bool:
        return self.name in MIXED_PRECISIONS

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype autocast computes matmuls in (fp32 unless mixed)."""
        return _HALF.get(self.name, torch.float32)

    def autocast(self):
        """The context a group's forward runs in: autocast to the 16-bit type, or nothing."""
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute_dtype)

    def wire_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype a tensor of `dtype` is sent between ranks in: float tensors in the compute dtype when mixed."""
        return self.compute_dtype if self.mixed and dtype.is_floating_point else dtype

    def apply_backend_flags(self) -> None:
        """tf32 on CUDA: let matmuls and convolutions use TF32 tensor cores (process-wide torch flags)."""
        if self.device_type == "cuda":
            allow = self.name == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = allow
            torch.backends.cudnn.allow_tf32 = allow

    def loss_scaler(self, any_rank):
        """A `LossScaler` for fp16 (its skip decision agreed over ranks by `any_rank(bool) -> bool`), else None."""
        return LossScaler(any_rank) if self.name == "fp16" else None


class LossScaler:
    """Dynamic loss scaling for fp16, with the step-skip decision taken over all ranks.

    The rule of ``torch.amp.GradScaler`` (scale 2^16 at start; the loss is multiplied by the scale; before the
    optimizer step every gradient is multiplied by 1 / scale; if any gradient is inf or NaN the step is skipped and
    the scale halves, after `growth_interval` clean steps in a row it doubles). GradScaler decides to skip per
    process from the gradients it sees; tag's ranks hold different parameters (model parallel groups), so the
    inf check is combined over every rank (`any_rank`) and all ranks skip or step together.
    """

    def __init__(self, any_rank, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        self.any_rank, self.scale = any_rank, float(init_scale)
        self.growth, self.backoff, self.interval = growth_factor, backoff_factor, growth_interval
        self._clean = 0

    def step(self, optimizer) -> bool:
        """Unscale the gradients of `optimizer`'s parameters, then step it unless any rank saw inf/NaN; update the
        scale. Returns whether the step ran."""
        inv = 1.0 / self.scale
        bad = False
        for group in optimizer.param_groups if optimizer is not None else ():
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(inv)
                    bad = bad or not bool(torch.isfinite(p.grad).all())
        if self.any_rank(bad):
            self.scale *= self.backoff
            self._clean = 0
            return False
        if optimizer is not None:
            optimizer.step()
        self._clean += 1
        if self._clean == self.interval:
            self.scale *= self.growth
            self._clean = 0
        return True
