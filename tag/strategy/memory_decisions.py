"""Memory and precision decisions of plan.json version 2 (docs/plan.md § memory and precision): the per-group
``zero`` stage and ``recompute`` flag, the plan's ``training.precision``, and which device types support which
precision.

Per decision::

    {"group": 3, "rows": {...}, "sync": "ring", "zero": 2, "recompute": true, ...}

* ``zero`` 0-3 (ZeRO, Rajbhandari et al. 2020) over the group's replicas (the devices with rows): 1 shards the
  optimizer states, 2 also the gradients (reduce-scatter instead of all-reduce), 3 also the weights (gathered
  before the forward and again before the backward). A stage above 0 needs at least two replicas.
* ``recompute``: the forward keeps only the group's inputs; the group's forward runs again before its backward.

``training.precision``: "fp32"; "tf32" (fp32 storage, tensor-core matmuls and convolutions on Ampere and later);
"fp16" / "bf16" mixed precision: autocast compute in the 16-bit type, fp32 master weights, gradients and optimizer
states; fp16 with dynamic loss scaling. Absent keys read as zero 0, recompute false and precision fp32.
"""

from __future__ import annotations

from tag.errors import InputError, short_repr
from tag.strategy import Decision

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
MIXED_PRECISIONS = ("fp16", "bf16")  # autocast compute in 16 bits, fp32 master weights
ZERO_STAGES = (0, 1, 2, 3)


def max_zero(pipelined: bool) -> int:
    """The highest ZeRO stage a plan may give a group: 3, or 1 in a pipelined plan (gradients accumulate over the
    micro-batches unsharded; deploy, like DeepSpeed's pipeline engine, runs ZeRO 1 there and no higher stage).

    >>> max_zero(False), max_zero(True)
    (3, 1)
    """
    return 1 if pipelined else 3


def peak_class(precision: str) -> str:
    """Which catalog peak a precision computes at: "fp32", "tf32" or "amp" (the 16-bit tensor-core peak).

    >>> [peak_class(p) for p in PRECISIONS]
    ['fp32', 'tf32', 'amp', 'amp']
    """
    if precision in MIXED_PRECISIONS or precision == "amp":
        return "amp"
    return "tf32" if precision == "tf32" else "fp32"


def compute_bytes(precision: str) -> int:
    """Bytes per element of activations computed and saved under `precision` (2 under fp16/bf16 autocast).

    >>> compute_bytes("bf16"), compute_bytes("tf32")
    (2, 4)
    """
    return 2 if peak_class(precision) == "amp" else 4


def unsupported_reason(device_type, precision: str) -> str | None:
    """Why a device type cannot train at `precision`, or None when it can.

    GPUs: tf32 and bf16 need the catalog's ``tf32_tflops`` (Ampere and later), fp16 its ``amp_tflops`` (a GTX 1080
    Ti has one, at 1/64 of its FP32 rate: allowed, and costed as slow). CPUs: fp32 and bf16 (``torch.autocast`` on
    CPU).
    """
    if precision == "fp32":
        return None
    extra = getattr(device_type, "extra", None) or {}
    if device_type.kind == "cpu":
        return None if precision == "bf16" else f"CPU devices train in fp32 or bf16, not {precision}"
    if precision in ("tf32", "bf16") and not extra.get("tf32_tflops"):
        return f"{device_type.name} has no {precision} (Ampere or later GPUs have it)"
    if precision == "fp16" and not extra.get("amp_tflops"):
        return f"{device_type.name} has no fp16 tensor-core peak in the catalog"
    return None


def check_precision_supported(cluster, precision: str, file: str, where: str) -> None:
    """InputError naming `file` and `where` unless every device type of `cluster` supports `precision`."""
    if precision not in PRECISIONS:
        raise InputError(file, where, "one of " + ", ".join(PRECISIONS), short_repr(precision))
    for dt in {d.type.name: d.type for d in cluster.devices}.values():
        why = unsupported_reason(dt, precision)
        if why is not None:
            raise InputError(file, where, f"a precision every device supports ({why}; fp32 always works)",
                             short_repr(precision))


def memory_to_json(decision: Decision) -> dict:
    """The decision's memory keys.

    >>> memory_to_json(Decision(rows=(2, 2), zero=2))
    {'zero': 2, 'recompute': False}
    """
    return {"zero": int(decision.zero), "recompute": bool(decision.recompute)}


def parse_memory(d: dict, path: str, where: str, n_replicas: int | None = None) -> dict:
    """``zero`` and ``recompute`` of one plan decision (object `d` at JSON path `where`) as Decision fields.
    n_replicas: the replicas ZeRO shards over (a sharded group's replica count); None = the devices with rows."""
    zero = d.get("zero", 0)
    if zero not in ZERO_STAGES or isinstance(zero, bool) or not isinstance(zero, int):
        raise InputError(path, f"{where}.zero", "a ZeRO stage 0, 1, 2 or 3", short_repr(zero))
    recompute = d.get("recompute", False)
    if not isinstance(recompute, bool):
        raise InputError(path, f"{where}.recompute", "true or false", short_repr(recompute))
    if n_replicas is None:
        n_replicas = sum(1 for r in d.get("rows", {}).values() if r)
    if zero > 0 and n_replicas < 2:
        raise InputError(path, f"{where}.zero", "0 for a group with one replica (ZeRO shards over replicas)",
                         short_repr(zero))
    return {"zero": zero, "recompute": recompute}
