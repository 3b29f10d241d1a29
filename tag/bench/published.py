"""`tag bench --published`: the catalog cost model's predictions against published GPU training throughputs.

For every single-GPU row tag can build (ResNet-50 v1 / v1.5, BERT-large at sequence 128 / 384 / 512), the
prediction at the row's batch (`published_predict`), the error, the MAPE per model family and precision, and for
the DGX-1 scaling rows the 1- and 8-GPU predictions and the scaling efficiency 100 x T8 / (8 x T1), and for the
512-GPU Horovod rows the efficiency as Horovod synced (`published_horovod`: fusion cycles, NCCL2's flat ring). With
`fit`, the GPU efficiency parameters are first refitted (`tag.cost.calibrate.coordinate_fit`: FP32 rows, then
the tf32 tensor-core fractions on the TF32 rows, then the amp fractions on the AMP fit rows); without it the shipped
parameters are reported. With `logo`, each GPU's FP32 rows are predicted by parameters fitted on the other GPUs'
FP32 rows (leave one GPU out).

The AMP rows are split once (`amp_split`): the rows on AMP_FIT_DEVICES (V100 16 GB, A100 40 GB: the two GPUs with
both ResNet-50 and BERT-large AMP rows from several frameworks) fit the amp fractions; every other AMP row (A100
80 GB, H100, A10, RTX 2080 Ti) is held out, and its MAPE is reported on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tag.bench.data import published_table
from tag.bench.published_horovod import HorovodResult, horovod_results
from tag.bench.published_predict import predict_rows, predict_samples_per_s
from tag.bench.published_rows import PublishedRow, parse_rows, read_table
from tag.cost.calibrate import AMP_GRID, TC_GRID, coordinate_fit, describe, mape
from tag.cost.efficiency import params_for

# DGX-1 NVLink per GPU and direction (datasheets): P100 4 links x 20 GB/s, V100 6 links x 25 GB/s, in Gbit/s.
DGX1 = {"P100": ("P100-16GB", 4 * 20 * 8.0), "V100": ("V100-16GB", 6 * 25 * 8.0)}
# Scaling-table models this project builds (AlexNet is not: tf_cnn_benchmarks' variant is not in the zoo).
# Inception-v3, ResNet-152 and VGG-16 are in no fitted row: their 1-GPU errors are out-of-sample checks.
SCALING_MODELS = {"ResNet-50": "resnet50_v1", "Inception-v3": "inception_v3", "ResNet-152": "resnet152",
                  "VGG-16": "vgg16"}


# GPUs whose AMP rows fit the amp tensor-core fractions; the other GPUs' AMP rows are held out.
AMP_FIT_DEVICES = ("V100-16GB", "A100-40GB")


def amp_split(rows: list[PublishedRow]) -> tuple[list[PublishedRow], list[PublishedRow]]:
    """(fit, held out): the AMP rows on AMP_FIT_DEVICES and the other AMP rows, each in table order."""
    amp = [r for r in rows if r.precision == "amp"]
    return [r for r in amp if r.device in AMP_FIT_DEVICES], [r for r in amp if r.device not in AMP_FIT_DEVICES]


@dataclass(frozen=True)
class RowResult:
    """One single-GPU row: published and predicted samples/s, error percent = 100 x (pred - pub) / pub;
    `in_fit`: whether the row was one the parameters were fitted on."""

    row: PublishedRow
    predicted: float
    in_fit: bool = True

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.row.published) / self.row.published


@dataclass(frozen=True)
class ScalingResult:
    """One DGX-1 scaling case: samples/s on 1 and 8 GPUs, published and predicted."""

    model: str
    system: str
    batch_per_gpu: int
    published_1gpu: float
    predicted_1gpu: float
    published_8gpu: float
    predicted_8gpu: float
    model_note: str = ""  # how the 8-GPU run is modelled (sync overlap, ring rate, fitted or not)

    @property
    def error_1gpu_pct(self) -> float:
        return 100.0 * (self.predicted_1gpu - self.published_1gpu) / self.published_1gpu

    @property
    def published_efficiency_pct(self) -> float:
        return 100.0 * self.published_8gpu / (8 * self.published_1gpu)

    @property
    def predicted_efficiency_pct(self) -> float:
        return 100.0 * self.predicted_8gpu / (8 * self.predicted_1gpu)


@dataclass(frozen=True)
class MapeLine:
    family: str  # a model family or "all"
    precision: str
    rows: int
    mape_pct: float


@dataclass(frozen=True)
class LogoLine:
    """Leave one GPU out: the held-out GPU's FP32 rows predicted by parameters fitted without them."""

    gpu: str
    rows: int
    mape_pct: float
    params: str


@dataclass
class PublishedReport:
    params: str  # the GPU parameters the predictions used (`describe`)
    fitted: bool  # True when `params` were refitted in this run
    rows: list[RowResult] = field(default_factory=list)
    mape: list[MapeLine] = field(default_factory=list)
    scaling: list[ScalingResult] = field(default_factory=list)
    logo: list[LogoLine] = field(default_factory=list)
    horovod: list[HorovodResult] = field(default_factory=list)  # the 512-GPU Horovod rows (`published_horovod`)

    @property
    def logo_mape_pct(self) -> float | None:
        """Row-weighted MAPE over every held-out GPU (None without the leave-one-GPU-out run)."""
        n = sum(x.rows for x in self.logo)
        return sum(x.rows * x.mape_pct for x in self.logo) / n if n else None


# How each scaling system's framework synced, as stated in its row's `framework`. TensorFlow ~1.1's replicated
# variables with NCCL (tf_cnn_benchmarks, 2017): modelled as all-reducing after the whole backward, on a ring whose
# effective rate is fitted on one row (FIT_ROW) and checked on the others. PyTorch (NGC) DDP: buckets overlapped with
# the backward at the NVLink rate.
FIT_ROW = "VGG-16"


def _system(sysrow: dict) -> tuple[str, bool]:
    """(generation, overlap_sync) of a scaling system row."""
    gen = "V100" if "V100" in sysrow["system"] else "P100"
    return gen, "TensorFlow" not in sysrow["framework"]


def fit_effective_gbps(key: str, fam: str, device: str, batch: int, target_pct: float, params: dict | None,
                       lo: float = 1.0, hi: float = 2000.0, steps: int = 24) -> float:
    """The intra-machine ring rate (Gbit/s) at which 8 GPUs syncing after the backward reach `target_pct` scaling
    efficiency for this row (bisection on log-rate; efficiency rises with the rate)."""
    one = predict_samples_per_s(key, fam, device, batch, params=params)
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        eight = predict_samples_per_s(key, fam, device, 8 * batch, count=8, intra_gbps=mid, params=params,
                                      overlap_sync=False)
        if 100.0 * eight / (8 * one) < target_pct:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5


def _model_key(name: str, sysrow: dict) -> str | None:
    key = SCALING_MODELS.get(name)
    if key == "resnet50_v1" and "v1.5" in sysrow["framework"]:
        key = "resnet50_v15"
    return key


def scaling_results(params: dict | None = None) -> list[ScalingResult]:
    """Every DGX-1 scaling entry tag can build, predicted on 1 GPU and on 8 GPUs of one DGX-1 (dp-even), each
    system as its framework synced (`_system`); a TensorFlow system's ring rate is fitted on its FIT_ROW."""
    out = []
    for sysrow in read_table(published_table("scaling.json")):
        gen, overlap = _system(sysrow)
        device, nvlink_gbps = DGX1[gen]
        rate = nvlink_gbps
        if not overlap and FIT_ROW in sysrow["per_gpu_batch"]:
            key = _model_key(FIT_ROW, sysrow)
            b = sysrow["per_gpu_batch"][FIT_ROW]
            target = 100.0 * sysrow["eight_gpu_images_s"][FIT_ROW] / (8 * sysrow["one_gpu_images_s"][FIT_ROW])
            rate = fit_effective_gbps(key, key, device, b, target, params)
        for name, b in sysrow["per_gpu_batch"].items():
            key = _model_key(name, sysrow)
            if key is None:
                continue
            fam = "resnet50" if key.startswith("resnet50") else key
            one = predict_samples_per_s(key, fam, device, b, params=params)
            eight = predict_samples_per_s(key, fam, device, 8 * b, count=8, intra_gbps=rate, params=params,
                                          overlap_sync=overlap)
            how = "DDP overlap" if overlap else f"sync after backward, ring {rate:.0f} Gb/s" + \
                (" (fitted here)" if name == FIT_ROW else "")
            out.append(ScalingResult(name, f"DGX-1 {gen}", b, sysrow["one_gpu_images_s"][name], one,
                                     sysrow["eight_gpu_images_s"][name], eight, how))
    return out


def _fit_params(rows: list[PublishedRow], log: Callable[[str], None]):
    """FP32 fit, then the tf32 tensor-core fractions on the TF32 rows, then the amp fractions on the AMP fit rows
    (`amp_split`); returns EfficiencyParams."""
    fp32 = [r for r in rows if r.precision == "fp32"]
    tf32 = [r for r in rows if r.precision == "tf32"]
    amp_fit, _held = amp_split(rows)
    first = coordinate_fit(lambda p: predict_rows(fp32, {"gpu": p}), [r.published for r in fp32], log=log)
    log(f"fitted on FP32 rows: {describe(first.params)}  (FP32 MAPE {first.mape_pct:.1f}%)")
    second = coordinate_fit(lambda p: predict_rows(tf32, {"gpu": p}), [r.published for r in tf32],
                            start=first.params, grid=TC_GRID)
    log(f"fitted on TF32 rows: {describe(second.params)}  (TF32 MAPE {second.mape_pct:.1f}%)")
    third = coordinate_fit(lambda p: predict_rows(amp_fit, {"gpu": p}), [r.published for r in amp_fit],
                           start=second.params, grid=AMP_GRID)
    log(f"fitted: {describe(third.params)}  (AMP fit-row MAPE {third.mape_pct:.1f}%)")
    return third.params


def _mape_lines(results: list[RowResult]) -> list[MapeLine]:
    """MAPE per family (and "all") and precision; AMP rows as "amp fit" and "amp held-out" lines."""
    def precision_of(x: RowResult) -> str:
        if x.row.precision != "amp":
            return x.row.precision
        return "amp fit" if x.in_fit else "amp held-out"

    out = []
    for fam in ("resnet50", "bert_large", "all"):
        for prec in ("fp32", "tf32", "amp fit", "amp held-out"):
            sel = [x for x in results if precision_of(x) == prec and fam in ("all", x.row.family)]
            if sel:
                out.append(MapeLine(fam, prec, len(sel), mape([x.predicted for x in sel],
                                                              [x.row.published for x in sel])))
    return out


def published_report(fit: bool = False, logo: bool = False,
                     log: Callable[[str], None] = lambda _m: None) -> PublishedReport:
    """Every table of the comparison (see the module docstring); `log` receives the fit's progress lines."""
    pred_rows = parse_rows(read_table(published_table("gpu-training-throughput.json")))
    gpu = _fit_params(pred_rows, log) if fit else params_for("gpu")
    params = {"gpu": gpu} if fit else None
    rep = PublishedReport(describe(gpu), fit)
    held = set(amp_split(pred_rows)[1])
    rep.rows = [RowResult(r, p, r not in held) for r, p in zip(pred_rows, predict_rows(pred_rows, params))]
    rep.mape = _mape_lines(rep.rows)
    rep.scaling = scaling_results(params)
    rep.horovod = horovod_results(with_simulate=True)
    if logo:
        fp32 = [r for r in pred_rows if r.precision == "fp32"]
        for dev in sorted({r.device for r in fp32}):
            train = [r for r in fp32 if r.device != dev]
            held = [r for r in fp32 if r.device == dev]
            res = coordinate_fit(lambda p, t=train: predict_rows(t, {"gpu": p}), [r.published for r in train],
                                 start=gpu, sweeps=1)
            err = mape(predict_rows(held, {"gpu": res.params}), [r.published for r in held])
            rep.logo.append(LogoLine(dev, len(held), err, describe(res.params)))
            log(f"  LOGO {dev}: {err:.1f}%")
    return rep
