"""The published comparison as markdown tables or one JSON-ready dict (`PublishedReport` in, text out)."""

from __future__ import annotations

from tag.bench.published import PublishedReport

PREAMBLE = """Each row: a published single-GPU training throughput (the tables shipped in `tag/bench/data/published/`,
each row with its source) and tag's prediction with the built-in catalog and the calibrated roofline cost model
at the row's batch (one-device cluster, dp-even, simulated iteration time ignoring memory limits). Graphs:
ResNet-50 v1.5 = `datasets/models/resnet50.onnx`, ResNet-50 v1 = the ONNX light zoo's ResNet-50, BERT-large =
the datasets zoo builder exported at sequence 128 / 384 / 512, Inception-v3 = `datasets/models/inception_v3.onnx`.
Optimizer: momentum SGD for the CNNs, Adam for BERT; BERT pre-training rows (gradient accumulation) and rows that
say so exclude the update. Precision: `fp32` rows ran on the FP32 pipes; `tf32` rows requested FP32 on
Ampere/Hopper, where convolutions and GEMMs ran in TF32 (predicted with precision "tf32"); `amp` rows ran FP16
mixed precision (predicted with precision "fp16": 16-bit activations, fp32 master weights cast per iteration,
GradScaler's unscale pass, `tag/cost/mixed_precision.py`), with the row's convolution layout (`nhwc` when the row
says NHWC or its framework runs 16-bit convolutions channels-last: TensorFlow + XLA, MXNet; `nchw` for PyTorch's
default format, which adds a transpose of each convolution's input and output). The amp tensor-core fractions are
fitted on the V100 16 GB and A100 40 GB AMP rows only (`in fit` = yes); the other AMP rows (A100 80 GB, H100,
A10, RTX 2080 Ti) are held out (`in fit` = no) and their MAPE is the `amp held-out` line. Every FP32 and TF32 row
is a fitted row. The GPU parameters are one set for every model and GPU (`tag/cost/efficiency.py`, fitted by
`tag/cost/calibrate.py`, sources in `tag/topology/catalog.py`). The scaling table predicts 8 GPUs in one DGX-1
(NVLink per GPU and direction from the datasheets: P100 80 GB/s, V100 150 GB/s); its Inception-v3, ResNet-152
and VGG-16 rows are in no fitted row, so their 1-GPU errors are out-of-sample checks. The leave-one-GPU-out table
(`--logo`) refits the FP32 parameters without each GPU's rows and predicts that GPU.
"""


HOROVOD_NOTE = """The Horovod rows (`tag/bench/data/published/horovod512.json`, source there) are predicted as Horovod
~0.11 synced (`tag/bench/published_horovod.py`): each gradient ready at its group's end of backward on one GPU; every
5 ms cycle the ready gradients are fused in ready order into buffers of at most 64 MiB and all-reduced one after
another on NCCL2's flat ring over all 512 GPUs, 2(n-1)/n x S / 25 Gb/s + 2(n-1) x alpha each; the iteration is the
one-GPU iteration plus the last all-reduce's end past the backward. One fitted constant: alpha, the ring's step
latency across machines, fitted on VGG-16 and held for the other rows (NCCL's tuning.cc network ring step today:
14 us). The last column is `tag simulate --baseline dp-even` (and dp-proportional) on the same cluster (25 MiB
buckets, ring / tree / hierarchical chosen by cost as today's NCCL does, overlapped with the backward): what a
modern stack would reach, not what Horovod did.
"""


def _table(headers: list, rows: list) -> str:
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _precision_cell(row) -> str:
    """A row's precision class, with the convolution layout for a ResNet AMP row ("amp nchw")."""
    return f"{row.precision} {row.conv_layout}" if row.precision == "amp" and row.family != "bert_large" \
        else row.precision


def published_markdown(rep: PublishedReport) -> str:
    """Single-GPU rows, MAPE per family and precision, DGX-1 scaling, the parameters, leave-one-GPU-out."""
    rows = [[x.row.family, x.row.model_key.split("_")[-1], x.row.gpu[:22], _precision_cell(x.row), x.row.label,
             x.row.batch, f"{x.row.published:.1f}", f"{x.predicted:.1f}", f"{x.error_pct:+.1f}",
             "yes" if x.in_fit else "no"] for x in rep.rows]
    parts = ["## Single GPU: predicted vs published samples/s\n",
             _table(["family", "variant", "gpu", "precision", "framework", "batch", "published", "predicted",
                     "error %", "in fit"], rows),
             "## MAPE per family and precision\n",
             _table(["family", "precision", "rows", "MAPE %"],
                    [[m.family, m.precision, m.rows, f"{m.mape_pct:.1f}"] for m in rep.mape]),
             "## 8-GPU DGX-1 scaling (dp-even)\n",
             _table(["model", "system", "batch/GPU", "pub 1", "pred 1", "error 1 %", "pub 8", "pred 8",
                     "pub eff %", "pred eff %", "points", "8-GPU model"],
                    [[s.model, s.system, s.batch_per_gpu, f"{s.published_1gpu:.0f}", f"{s.predicted_1gpu:.0f}",
                      f"{s.error_1gpu_pct:+.1f}", f"{s.published_8gpu:.0f}", f"{s.predicted_8gpu:.0f}",
                      f"{s.published_efficiency_pct:.1f}", f"{s.predicted_efficiency_pct:.1f}",
                      f"{s.predicted_efficiency_pct - s.published_efficiency_pct:+.1f}", s.model_note]
                     for s in rep.scaling]),
             "## 512-GPU Horovod scaling (tensor fusion 64 MiB / 5 ms, NCCL2 flat ring, 25 Gb/s RoCE)\n",
             _table(["model", "GPUs", "batch/GPU", "pub eff %", "pred eff %", "points", "1 GPU ms", "512 GPU ms",
                     "fused all-reduces", "gradients MB", "ring step us", "tag simulate dp-even / dp-prop eff %"],
                    [[h.model, h.gpus, h.batch_per_gpu, f"{h.published_pct:.0f}", f"{h.predicted_pct:.1f}",
                      f"{h.predicted_pct - h.published_pct:+.1f}", f"{h.one_gpu_ms:.1f}", f"{h.predicted_ms:.1f}",
                      h.allreduces, f"{h.gradient_mb:.1f}",
                      f"{h.step_latency_us:.1f}" + (" (fitted here)" if h.fitted else ""),
                      "-" if h.simulate_pct is None else f"{h.simulate_pct:.1f} / {h.simulate_prop_pct:.1f}"]
                     for h in rep.horovod]),
             HOROVOD_NOTE,
             f"{'Fitted in this run' if rep.fitted else 'Shipped'} GPU parameters (`tag/cost/efficiency.py`, "
             f"fit: `tag/cost/calibrate.py`): `{rep.params}`\n"]
    if rep.logo:
        parts += ["## Leave-one-GPU-out (fit on the other GPUs' FP32 rows)\n",
                  _table(["held-out GPU", "rows", "MAPE %", "parameters fitted without it"],
                         [[x.gpu, x.rows, f"{x.mape_pct:.1f}", x.params] for x in rep.logo]),
                  f"Leave-one-GPU-out MAPE over all FP32 rows: {rep.logo_mape_pct:.1f}%\n"]
    return "\n".join(parts)


def published_json(rep: PublishedReport) -> dict:
    """One dict: `rows`, `mape`, `scaling` (one dict each), `params`, `fitted`, and `logo` / `logo_mape_pct`."""
    out = {
        "rows": [{"family": x.row.family, "variant": x.row.model_key.split("_")[-1], "gpu": x.row.gpu,
                  "device": x.row.device, "precision": x.row.precision, "framework": x.row.label,
                  "batch": x.row.batch, "published_samples_per_s": x.row.published,
                  "predicted_samples_per_s": x.predicted, "error_pct": x.error_pct, "in_fit": x.in_fit,
                  "conv_layout": x.row.conv_layout} for x in rep.rows],
        "mape": [{"family": m.family, "precision": m.precision, "rows": m.rows, "mape_pct": m.mape_pct}
                 for m in rep.mape],
        "scaling": [{"model": s.model, "system": s.system, "batch_per_gpu": s.batch_per_gpu,
                     "published_1gpu": s.published_1gpu, "predicted_1gpu": s.predicted_1gpu,
                     "error_1gpu_pct": s.error_1gpu_pct, "published_8gpu": s.published_8gpu,
                     "predicted_8gpu": s.predicted_8gpu, "published_efficiency_pct": s.published_efficiency_pct,
                     "predicted_efficiency_pct": s.predicted_efficiency_pct, "model_note": s.model_note} for s in rep.scaling],
        "horovod": [{"model": h.model, "gpus": h.gpus, "batch_per_gpu": h.batch_per_gpu,
                     "published_efficiency_pct": h.published_pct, "predicted_efficiency_pct": h.predicted_pct,
                     "one_gpu_ms": h.one_gpu_ms, "predicted_ms": h.predicted_ms, "fused_allreduces": h.allreduces,
                     "gradient_mb": h.gradient_mb, "step_latency_us": h.step_latency_us, "fitted": h.fitted,
                     "simulate_dp_even_efficiency_pct": h.simulate_pct,
                     "simulate_dp_proportional_efficiency_pct": h.simulate_prop_pct} for h in rep.horovod],
        "params": rep.params,
        "fitted": rep.fitted,
    }
    if rep.logo:
        out["logo"] = [{"gpu": x.gpu, "rows": x.rows, "mape_pct": x.mape_pct, "params": x.params} for x in rep.logo]
        out["logo_mape_pct"] = rep.logo_mape_pct
    return out
