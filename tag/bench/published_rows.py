"""The published measurement tables as typed rows: which rows tag can predict, on which catalog GPU, in which
precision. Tables: `tag/bench/data/published/gpu-training-throughput.json` (single-GPU rows) and `scaling.json`
(1- and 8-GPU DGX-1 throughputs); each row carries its `source`.

Precision classes: "fp32" (plain FP32 pipes), "tf32" (rows that requested FP32 on Ampere/Hopper and ran
convolutions or GEMMs in TF32), "amp" (FP16 mixed precision, predicted with training precision "fp16").
Convolution layout of a row (`conv_layout`, costed only under mixed precision, `tag.cost.mixed_precision`): "nhwc"
when the row says NHWC or its framework runs 16-bit convolutions channels-last on its own (TensorFlow with XLA:
XLA's GPU layout assignment; MXNet: DeepLearningExamples' float16 runner sets ``--conv-layout NHWC``), else "nchw"
(PyTorch's default memory format; DeepLearningExamples' ConvNets ``main.py`` and Lambda's configs that run it do
not pass ``--memory-format nhwc``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tag.errors import InputError

# Row GPU names -> catalog device types (first match wins).
GPU_RULES = [
    ("V100-SXM2-16GB", "V100-16GB"), ("V100-SXM2-32GB", "V100-32GB"), ("V100-SXM3-32GB", "V100-32GB"),
    ("A100-SXM4-40GB", "A100-40GB"), ("A100-SXM4-80GB", "A100-80GB"), ("A100-PCIe-40GB", "A100-PCIE-40GB"),
    ("A100-PCIe-80GB", "A100-PCIE-80GB"), ("H100-SXM5-80GB", "H100-80GB"), ("H100-PCIe-80GB", "H100-PCIE-80GB"),
    ("A10 (24GB", "A10-24GB"), ("GTX 1080 Ti", "GTX1080Ti-11GB"), ("RTX 2080 Ti", "RTX2080Ti-11GB"),
    ("P100-SXM2-16GB", "P100-16GB"), ("K80", "K80"),
]


@dataclass(frozen=True)
class PublishedRow:
    """One published single-GPU measurement the project can predict (throughput in samples/s)."""

    family: str  # "resnet50" | "bert_large"
    model_key: str  # which graph: "resnet50_v15", "resnet50_v1", "bert_large_s384", ...
    device: str  # catalog device type name
    precision: str  # "fp32" | "tf32" | "amp"
    batch: int
    published: float  # samples/s
    no_update: bool  # timed forward and backward only
    label: str  # short description for the table
    gpu: str  # the row's GPU text
    conv_layout: str = "nhwc"  # "nhwc" | "nchw": memory format of convolution activations (`conv_layout`)

    @property
    def training_precision(self) -> str:
        """The `TrainingConfig.precision` the row is predicted at (every published AMP row ran fp16)."""
        return "fp16" if self.precision == "amp" else self.precision


def read_table(path: str | Path):
    """The parsed JSON of a published table; InputError naming the file when it is missing or malformed."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError(str(path), "file", "a published measurement table", "no such file") from None
    except json.JSONDecodeError as e:
        raise InputError(str(path), f"line {e.lineno}", "valid JSON", e.msg) from None


def precision_class(text: str) -> str:
    """The precision a row ran in: "amp", "tf32" or "fp32" (FP32 requested on Ampere/Hopper is TF32).

    >>> precision_class("FP32 requested (TF32 convs by default)"), precision_class("FP32 (TF 2.3: no TF32 path)")
    ('tf32', 'fp32')
    """
    if "AMP" in text or "FP16" in text:
        return "amp"
    if "TF32" in text and "no TF32" not in text:
        return "tf32"
    return "fp32"


def conv_layout(precision: str, framework: str) -> str:
    """Memory format a row's convolutions ran in, from its precision and framework texts (module docstring).

    >>> conv_layout("AMP (FP16 mixed, NHWC)", "PyTorch"), conv_layout("AMP (FP16 mixed)", "PyTorch 1.13")
    ('nhwc', 'nchw')
    """
    if "NHWC" in precision or "MXNet" in framework or ("TensorFlow" in framework and "XLA" in precision):
        return "nhwc"
    return "nchw"


def device_for(gpu: str) -> str | None:
    """Catalog device type for a row's GPU text, or None.

    >>> device_for("V100-SXM2-16GB (DGX-1)"), device_for("Mystery GPU")
    ('V100-16GB', None)
    """
    for pat, name in GPU_RULES:
        if pat in gpu:
            return name
    return None


def parse_rows(rows: list) -> list[PublishedRow]:
    """The rows whose model and GPU this project can build, as `PublishedRow`s (in table order)."""
    out = []
    for r in rows:
        model, dev = r["model"], device_for(r["gpu"])
        if dev is None:
            continue
        if model.startswith("ResNet-50"):
            family, key = "resnet50", ("resnet50_v1" if model.startswith("ResNet-50 v1 ") else "resnet50_v15")
        elif model.startswith("BERT-large"):
            m = re.search(r"seq (\d+)", model)
            if not m:
                continue
            family, key = "bert_large", f"bert_large_s{m.group(1)}"
        else:
            continue
        note = (r.get("confidence") or "") + " " + model
        # BERT pre-training recipes accumulate gradients over many micro-batches per optimizer step (the
        # rows give the micro-batch), so the update is amortised away; other rows say when they exclude it.
        no_update = "excludes optimizer" in note or "no update" in note or "pretraining" in model
        out.append(PublishedRow(family, key, dev, precision_class(r["precision"]), int(r["batch_per_gpu"]),
                                float(r["throughput"]), no_update,
                                f"{r['framework'].split(',')[0][:28]}", r["gpu"],
                                conv_layout(r["precision"], r["framework"])))
    return out
