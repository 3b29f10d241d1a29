"""Predictions against published GPU training throughputs: `python benchmarks/published.py [--fit] [--logo] [--out F.md]`.

For every row of the shared reference tables (`/work/shared/reference`, or `--reference DIR`, or the
`TAG_REFERENCE_DIR` environment variable) whose model this project builds (ResNet-50 v1 / v1.5,
BERT-large at sequence 128 / 384 / 512, Inception-v3), the catalog cost model predicts the single-GPU
throughput at the row's batch (a one-device cluster, dp-even, `tag.sim.simulate`, iteration time ignoring
memory), and for the DGX-1 scaling rows the 8-GPU dp-even throughput. Prints predicted, published and the
error per row, the MAPE per model family and precision, and the 8-GPU scaling efficiency against the
published one. `--fit` refits the shared GPU efficiency parameters on the FP32 rows (coordinate search,
same parameters for every model and GPU); `--logo` reports the leave-one-GPU-out error (fit on the other
GPUs' FP32 rows, predict the held-out GPU's rows). Precision classes: "fp32" (plain FP32 pipes), "tf32"
(rows that requested FP32 on Ampere/Hopper and ran convolutions or GEMMs in TF32), "amp" (not predicted).
"""

# (no `from __future__ import annotations`: `tag bench` loads this file without registering it in
# sys.modules, and dataclasses resolve string annotations through sys.modules)
import argparse
import json
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_REFERENCE_DIR = "/work/shared/reference"

# Row GPU names -> catalog device types (first match wins).
GPU_RULES = [
    ("V100-SXM2-16GB", "V100-16GB"), ("V100-SXM2-32GB", "V100-32GB"), ("V100-SXM3-32GB", "V100-32GB"),
    ("A100-SXM4-40GB", "A100-40GB"), ("A100-SXM4-80GB", "A100-80GB"), ("A100-PCIe-40GB", "A100-PCIE-40GB"),
    ("A100-PCIe-80GB", "A100-PCIE-80GB"), ("H100-SXM5-80GB", "H100-80GB"), ("H100-PCIe-80GB", "H100-PCIE-80GB"),
    ("A10 (24GB", "A10-24GB"), ("GTX 1080 Ti", "GTX1080Ti-11GB"), ("RTX 2080 Ti", "RTX2080Ti-11GB"),
    ("P100-SXM2-16GB", "P100-16GB"), ("K80", "K80"),
]
# DGX-1 NVLink per GPU and direction (datasheets): P100 4 links x 20 GB/s, V100 6 links x 25 GB/s.
DGX1 = {"P100": ("P100-16GB", 4 * 20 * 8.0), "V100": ("V100-16GB", 6 * 25 * 8.0)}
# Scaling-table models this project builds (AlexNet is not: tf_cnn_benchmarks' variant is not in the zoo).
# Inception-v3, ResNet-152 and VGG-16 are in no fitted row: their 1-GPU errors are out-of-sample checks.
SCALING_MODELS = {"ResNet-50": "resnet50_v1", "Inception-v3": "inception_v3", "ResNet-152": "resnet152",
                  "VGG-16": "vgg16"}
# Optimizer the published runs used: momentum SGD for the CNNs, Adam / LAMB (Adam's state) for BERT.
FAMILY_OPTIMIZER = {"resnet50": "momentum", "bert_large": "adam", "inception_v3": "momentum",
                    "resnet152": "momentum", "vgg16": "momentum"}
VGG16_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


@dataclass(frozen=True)
class PublishedRow:
    """One published single-GPU measurement the project can predict."""

    family: str  # "resnet50" | "bert_large"
    model_key: str  # which graph: "resnet50_v15", "resnet50_v1", "bert_large_s384", ...
    device: str  # catalog device type name
    precision: str  # "fp32" | "tf32" | "amp"
    batch: int
    published: float  # samples/s
    no_update: bool  # timed forward and backward only
    label: str  # short description for the table
    gpu: str  # the row's GPU text


def reference_dir(arg: str | None) -> str:
    """The directory holding the published tables: `arg`, $TAG_REFERENCE_DIR, or the shared default."""
    return arg or os.environ.get("TAG_REFERENCE_DIR") or DEFAULT_REFERENCE_DIR


def _read_json(path: str):
    from tag.errors import InputError

    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError(path, "file", "published measurements ($TAG_REFERENCE_DIR or --reference DIR)",
                         "no such file") from None
    except json.JSONDecodeError as e:
        raise InputError(path, f"line {e.lineno}", "valid JSON", e.msg) from None


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


def device_for(gpu: str) -> str | None:
    """Catalog device type for a row's GPU text, or None."""
    for pat, name in GPU_RULES:
        if pat in gpu:
            return name
    return None


def parse_rows(rows: list) -> list[PublishedRow]:
    """The rows whose model and GPU this project can build, as `PublishedRow`s."""
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
                                f"{r['framework'].split(',')[0][:28]}", r["gpu"]))
    return out


# ---- graphs ------------------------------------------------------------------------------------------

def _light(name: str) -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light", f"light_{name}.onnx")


def _export(key: str) -> str:
    """A zoo-builder model exported on the meta device (datasets/zoo, as datasets/build.py does), cached in
    tmp: "bert_large_s<seq>" (BERT-large at that sequence), "resnet152" (v1.5), "vgg16" (configuration D)."""
    path = os.path.join(tempfile.gettempdir(), "tag-published", f"{key}.onnx")
    if os.path.exists(path):
        return path
    sys.path.insert(0, ROOT)
    import onnx

    from datasets.zoo import text, vision
    from datasets.zoo.export import export_spec
    from datasets.zoo.spec import InputSpec, ModelSpec

    image = (InputSpec("image", (1, 3, 224, 224)),)
    if key == "resnet152":
        spec = ModelSpec(key, lambda: vision.ResNet((3, 8, 36, 3)), image, True, "ResNet-152 v1.5")
    elif key == "vgg16":
        spec = ModelSpec(key, lambda: vision.VGG(VGG16_CFG), image, True, "VGG-16")
    else:
        seq = int(key.rsplit("_s", 1)[1])
        spec = ModelSpec(key, text.bert_large, (InputSpec("input_ids", (1, seq), "int64", 30522),), True,
                         f"BERT-large, seq {seq}")
    proto, _ = export_spec(spec)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(proto, path + ".part")
    os.replace(path + ".part", path)
    return path


def model_path(key: str) -> str:
    """The ONNX file for a model key (datasets models, the light zoo, or a cached BERT export)."""
    if key == "resnet50_v15":
        return os.path.join(ROOT, "datasets", "models", "resnet50.onnx")
    if key == "resnet50_v1":
        return _light("resnet50")
    if key == "inception_v3":
        return os.path.join(ROOT, "datasets", "models", "inception_v3.onnx")
    if key == "bert_large_s128":
        return os.path.join(ROOT, "datasets", "models", "bert_large.onnx")
    if re.fullmatch(r"bert_large_s\d+", key) or key in ("resnet152", "vgg16"):
        return _export(key)
    raise KeyError(key)


_GRAPHS: dict = {}


def group_graph(key: str, n_devices: int = 1):
    """Coarsened GroupGraph of a model key (cached)."""
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    if (key, n_devices) not in _GRAPHS:
        graph = load_model(model_path(key), batch_size=2)
        _GRAPHS[(key, n_devices)] = coarsen(graph, n_devices=n_devices)
    return _GRAPHS[(key, n_devices)]


# ---- predictions -------------------------------------------------------------------------------------

def _cluster(device: str, count: int = 1, intra_gbps: float | None = None):
    from tag.topology.loader import parse_topology

    m = {"name": "m0", "devices": [{"type": device, "count": count}]}
    if intra_gbps:
        m["intra_bandwidth_gbps"] = intra_gbps
    return parse_topology({"version": 1, "name": f"{count}x{device}", "machines": [m]}, "<published>")


def predict_samples_per_s(key: str, family: str, device: str, batch: int, precision: str = "fp32",
                          no_update: bool = False, count: int = 1, intra_gbps: float | None = None,
                          params: dict | None = None) -> float:
    """Predicted samples/s of one training iteration at global batch `batch` on `count` devices (dp-even),
    ignoring memory limits; `no_update` leaves the optimizer step out (single device only)."""
    from tag.cost.roofline import RooflineCostModel
    from tag.search.baselines import dp_even
    from tag.sim import simulate
    from tag.strategy import TrainingConfig

    gg = group_graph(key, count)
    training = TrainingConfig(optimizer=FAMILY_OPTIMIZER[family], precision=precision)
    cluster = _cluster(device, count, intra_gbps)
    cost = RooflineCostModel(gg, training, params)
    res = simulate(gg, cluster, cost, dp_even(gg, cluster, cost, training, batch), training)
    ms = res.fit_iteration_ms
    if no_update:
        ms -= sum(cost.update_ms(g, cluster.devices[0].type) for g in range(gg.n_groups))
    return batch / ms * 1e3


def predict_rows(rows: list[PublishedRow], params: dict | None = None) -> list[float]:
    """Predicted samples/s for each row."""
    return [predict_samples_per_s(r.model_key, r.family, r.device, r.batch, r.precision, r.no_update,
                                  params=params) for r in rows]


def mape(pred: list[float], pub: list[float]) -> float:
    """Mean absolute percentage error of `pred` against `pub`, percent."""
    return 100.0 * sum(abs(p - q) / q for p, q in zip(pred, pub)) / max(len(pub), 1)


def scaling_rows(ref: str, params: dict | None = None) -> list[list]:
    """One row per DGX-1 scaling entry we can build: model, GPU, batch, 1-GPU published, predicted and error
    (percent), 8-GPU published and predicted samples/s, scaling efficiency published vs predicted (percent)."""
    out = []
    for sysrow in _read_json(os.path.join(ref, "scaling.json")):
        gen = "V100" if "V100" in sysrow["system"] else "P100"
        device, nvlink = DGX1[gen]
        for name, b in sysrow["per_gpu_batch"].items():
            key = SCALING_MODELS.get(name)
            if key is None:
                continue
            if "v1.5" in sysrow["framework"] and key == "resnet50_v1":
                key = "resnet50_v15"
            fam = "resnet50" if key.startswith("resnet50") else key
            one = predict_samples_per_s(key, fam, device, b, params=params)
            eight = predict_samples_per_s(key, fam, device, 8 * b, count=8, intra_gbps=nvlink, params=params)
            p1, p8 = sysrow["one_gpu_images_s"][name], sysrow["eight_gpu_images_s"][name]
            out.append([name, f"DGX-1 {gen}", b, p1, one, 100 * (one - p1) / p1, p8, eight,
                        100 * p8 / (8 * p1), 100 * eight / (8 * one)])
    return out


# ---- fitting -----------------------------------------------------------------------------------------

FIT_GRID = {
    "e_conv": [0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9],
    "e_matmul": [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9],
    # up to ~one wave of 128 x 128 GEMM tiles on a large GPU (80-108 SMs x 128 x 128 x K=64 x 2 FLOP)
    "half_size_flops": [0.0, 1e7, 3e7, 1e8, 3e8],
    "knee_intensity": [0.0, 5.0, 10.0, 20.0, 40.0, 80.0],
    "mem_efficiency": [0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    "launch_us": [2.0, 5.0, 10.0, 20.0],
    "winograd_speedup": [1.0, 1.25, 1.5, 1.75, 2.0, 2.25],  # at most F(2x2,3x3)'s 2.25x fewer multiplies
}


_TC = [0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0]
TC_GRID = {"tc_conv": _TC, "tc_matmul": _TC}


def fit(rows: list[PublishedRow], start=None, sweeps: int = 2, grid=None, log=None):
    """Coordinate search of the GPU efficiency parameters minimising the MAPE of `rows`; returns
    (EfficiencyParams, mape percent). One parameter set for every model and GPU."""
    from tag.cost.efficiency import params_for

    grid = grid or FIT_GRID
    best = start or params_for("gpu")
    pub = [r.published for r in rows]
    best_err = mape(predict_rows(rows, {"gpu": best}), pub)
    for _ in range(sweeps):
        improved = False
        for name, values in grid.items():
            for v in values:
                cand = best.with_values(**{name: v})
                err = mape(predict_rows(rows, {"gpu": cand}), pub)
                if err < best_err - 1e-9:
                    best, best_err, improved = cand, err, True
            if log:
                log(f"  {name}: MAPE {best_err:.1f}%")
        if not improved:
            break
    return best, best_err


def describe(p) -> str:
    """The fitted GPU parameters in one line."""
    return (f"e_conv={p.base['conv']} e_matmul={p.base['matmul']} half_size_flops={p.half_size_flops:g} "
            f"knee_intensity={p.knee_intensity:g} mem_efficiency={p.mem_efficiency} launch_us={p.launch_us} "
            f"winograd_speedup={p.winograd_speedup} "
            f"tc_conv={p.tensor_core_fraction['conv']} tc_matmul={p.tensor_core_fraction['matmul']}")


# ---- report ------------------------------------------------------------------------------------------

def report(ref: str, do_fit: bool = False, do_logo: bool = False, log=print) -> dict:
    """Every table of the benchmark as plain data (lists of rows plus summary figures)."""
    rows = parse_rows(_read_json(os.path.join(ref, "gpu-training-throughput.json")))
    pred_rows = [r for r in rows if r.precision in ("fp32", "tf32")]
    fp32 = [r for r in pred_rows if r.precision == "fp32"]
    params = None
    out: dict = {}
    if do_fit:
        best, err = fit(fp32, log=log)
        log(f"fitted on FP32 rows: {describe(best)}  (FP32 MAPE {err:.1f}%)")
        best, err_tc = fit([r for r in pred_rows if r.precision == "tf32"], start=best, sweeps=2, grid=TC_GRID)
        params = {"gpu": best}
        out["fitted"] = describe(best)
        log(f"fitted: {out['fitted']}  (TF32 MAPE {err_tc:.1f}%)")
    pred = predict_rows(pred_rows, params)
    table = []
    for r, p in zip(pred_rows, pred):
        table.append([r.family, r.model_key.split("_")[-1], r.gpu[:22], r.precision, r.label, r.batch,
                      r.published, p, 100 * (p - r.published) / r.published])
    out["rows"] = table
    summary = []
    for fam in ("resnet50", "bert_large"):
        for prec in ("fp32", "tf32"):
            sel = [(p, r.published) for r, p in zip(pred_rows, pred) if r.family == fam and r.precision == prec]
            if sel:
                summary.append([fam, prec, len(sel), mape(*zip(*sel))])
    for prec in ("fp32", "tf32"):
        sel = [(p, r.published) for r, p in zip(pred_rows, pred) if r.precision == prec]
        summary.append(["all", prec, len(sel), mape(*zip(*sel))])
    out["summary"] = summary
    out["scaling"] = scaling_rows(ref, params)
    if do_logo:
        logo = []
        for dev in sorted({r.device for r in fp32}):
            train = [r for r in fp32 if r.device != dev]
            held = [r for r in fp32 if r.device == dev]
            p, _ = fit(train, start=(params or {}).get("gpu"), sweeps=1)
            hp = predict_rows(held, {"gpu": p})
            logo.append([dev, len(held), mape(hp, [r.published for r in held]), describe(p)])
            log(f"  LOGO {dev}: {logo[-1][2]:.1f}%")
        allh = sum(x[1] * x[2] for x in logo) / max(sum(x[1] for x in logo), 1)
        out["logo"] = logo
        out["logo_mape"] = allh
    return out


def table(headers: list, rows: list) -> str:
    """A markdown pipe table."""
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def markdown(out: dict) -> str:
    """The benchmark tables as markdown."""
    parts = ["## Single GPU: predicted vs published samples/s\n",
             table(["family", "variant", "gpu", "precision", "framework", "batch", "published", "predicted",
                    "error %"],
                   [[*r[:6], f"{r[6]:.1f}", f"{r[7]:.1f}", f"{r[8]:+.1f}"] for r in out["rows"]]),
             "\n## MAPE per family and precision\n",
             table(["family", "precision", "rows", "MAPE %"], [[*r[:3], f"{r[3]:.1f}"] for r in out["summary"]]),
             "\n## 8-GPU DGX-1 scaling (dp-even)\n",
             table(["model", "system", "batch/GPU", "pub 1", "pred 1", "error 1 %", "pub 8", "pred 8",
                    "pub eff %", "pred eff %"],
                   [[*r[:3], f"{r[3]:.0f}", f"{r[4]:.0f}", f"{r[5]:+.1f}", f"{r[6]:.0f}", f"{r[7]:.0f}",
                     f"{r[8]:.1f}", f"{r[9]:.1f}"] for r in out["scaling"]])]
    if "fitted" in out:
        parts.append(f"\nFitted GPU parameters: `{out['fitted']}`\n")
    if "logo" in out:
        parts += ["\n## Leave-one-GPU-out (fit on the other GPUs' FP32 rows)\n",
                  table(["held-out GPU", "rows", "MAPE %", "parameters fitted without it"],
                        [[r[0], r[1], f"{r[2]:.1f}", r[3]] for r in out["logo"]]),
                  f"\nLeave-one-GPU-out MAPE over all FP32 rows: {out['logo_mape']:.1f}%\n"]
    return "\n".join(parts)


def to_json(out: dict) -> dict:
    """The report as one JSON object: one dict per row (``rows``), per summary line and per scaling case."""
    keys = ["family", "variant", "gpu", "precision", "framework", "batch", "published_samples_per_s",
            "predicted_samples_per_s", "error_pct"]
    res = {"rows": [dict(zip(keys, r)) for r in out["rows"]],
           "mape": [dict(zip(["family", "precision", "rows", "mape_pct"], r)) for r in out["summary"]],
           "scaling": [dict(zip(["model", "system", "batch_per_gpu", "published_1gpu", "predicted_1gpu",
                                 "error_1gpu_pct", "published_8gpu", "predicted_8gpu", "published_efficiency_pct",
                                 "predicted_efficiency_pct"], r)) for r in out["scaling"]]}
    for k in ("fitted", "logo_mape"):
        if k in out:
            res[k] = out[k]
    if "logo" in out:
        res["logo"] = [dict(zip(["gpu", "rows", "mape_pct", "params"], r)) for r in out["logo"]]
    return res


PREAMBLE = """# Published GPU measurements vs tag's cost model

Generated by `python benchmarks/published.py --logo --out benchmarks/published.md` (also `tag bench --published`).

Each row: a published single-GPU training throughput (`/work/shared/reference/gpu-training-throughput.json`)
and tag's prediction with the built-in catalog and the calibrated roofline cost model at the row's batch
(one-device cluster, dp-even, simulated iteration time ignoring memory limits). Graphs: ResNet-50 v1.5 =
`datasets/models/resnet50.onnx`, ResNet-50 v1 = the ONNX light zoo's ResNet-50, BERT-large = the datasets zoo
builder exported at sequence 128 / 384 / 512, Inception-v3 = `datasets/models/inception_v3.onnx`.
Optimizer: momentum SGD for the CNNs, Adam for BERT; BERT pre-training rows (gradient accumulation) and
rows that say so exclude the update. Precision: `fp32` rows ran on the FP32 pipes; `tf32` rows requested
FP32 on Ampere/Hopper, where convolutions and GEMMs ran in TF32 (predicted with precision "tf32"); AMP rows
are not predicted. The GPU parameters are one set for every model and GPU (`tag/cost/efficiency.py`,
sources in `tag/topology/catalog.py`). The scaling table predicts 8 GPUs in one DGX-1 (NVLink per GPU and
direction from the datasheets: P100 80 GB/s, V100 150 GB/s); its Inception-v3, ResNet-152 and VGG-16 rows
(built from the datasets zoo builders) are in no fitted row, so their 1-GPU errors are out-of-sample checks.
The leave-one-GPU-out table refits the FP32 parameters without each GPU's rows and predicts that GPU.

"""


def run(args) -> int:
    """`tag bench --published` / this script: print the tables (or one JSON object with --json)."""
    ref = reference_dir(getattr(args, "reference", None))
    quiet = getattr(args, "json", False)
    out = report(ref, getattr(args, "fit", False), getattr(args, "logo", False),
                 log=(lambda *_: None) if quiet else (lambda m: print(m, file=sys.stderr)))
    text = markdown(out)
    if getattr(args, "out", None):
        with open(args.out, "w") as f:
            f.write(PREAMBLE + text)
    if quiet:
        print(json.dumps(to_json(out)))
    else:
        print(text)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default=None, metavar="DIR")
    ap.add_argument("--fit", action="store_true", help="refit the GPU efficiency parameters first")
    ap.add_argument("--logo", action="store_true", help="also report the leave-one-GPU-out error")
    ap.add_argument("--out", default=None, metavar="FILE.md")
    ap.add_argument("--json", action="store_true")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
