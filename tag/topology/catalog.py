"""The built-in device catalog: peak FP32 throughput, memory and memory bandwidth of common devices.

Units are in the names: `peak_tflops` = 10^12 FP32 FLOP/s on the regular (non-tensor-core) pipes,
`memory_gb` = 10^9 bytes, `memory_bandwidth_gbps` = 10^9 *bits* per second (900 GB/s = 7200 Gb/s).
`extra` records the tensor-core peaks for later use: `tf32_tflops` (TF32 tensor, dense) and `amp_tflops`
(FP16 with FP32 accumulate on tensor cores, dense; for devices without tensor cores the plain FP16 rate).
Every figure comes from the vendor's datasheet named in the comment beside it. A topology file's
`device_types` entries override (field by field) or extend this catalog.
"""

from __future__ import annotations

from tag.topology.cluster import DeviceType

# ---- Calibration of the GPU cost model (tag/cost/efficiency.py GPU_PARAMS, tag/cost/optimizer.py) ----------
# The datasheet figures below are not fitted. What was fitted is one set of efficiency parameters shared by
# every GPU and every model (no per-model or per-row constants):
#   e_max conv 0.70, e_max matmul 0.75        fraction of the FP32 peak large convolutions / GEMMs reach
#   winograd_speedup 2.25                     FP32 3x3 stride-1 convs (cuDNN Winograd; capped at F(2x2,3x3)'s
#                                             2.25x fewer multiplies)
#   half_size_flops 3e8                       a kernel of 3e8 FLOPs reaches half of e_max (fill the SMs)
#   knee_intensity 0 (off)                    the fit found no gain from an intensity knee
#   mem_efficiency 0.9, half_size_bytes 0     memory-bound kernels at 90 % of the datasheet bandwidth
#   launch_us 20                              per kernel, launch plus eager-framework dispatch (views launch none)
#   tensor_core_fraction conv 0.4, matmul 0.7 share of the TF32 tensor-core peak (tf32 rows)
#   amp_fraction conv 1.0, matmul 1.0         share of the FP16 tensor-core peak `amp_tflops` (amp fit rows)
# plus the optimizer update traffic counted from torch.optim's foreach kernels (adam 72, momentum 32, sgd 12
# bytes per parameter element; not fitted). Data: /work/shared/reference/gpu-training-throughput.json, its 32
# plain-FP32 rows (ResNet-50 v1/v1.5 and BERT-large seq 128/384/512 on P100-SXM2, GTX 1080 Ti, RTX 2080 Ti,
# V100 16/32 GB, A100 without TF32, K80; 1-GPU throughputs from NVIDIA DeepLearningExamples tables and logs,
# tf_cnn_benchmarks logs and the TensorFlow benchmarks page) for the FP32 terms, and its 28 TF32 rows (A10,
# A100, H100, "FP32 requested" on Ampere/Hopper) for the two tensor-core fractions, and 8 of its 17 FP16 AMP rows
# (the V100 16 GB and A100 40 GB ones; tag/bench/published.py AMP_FIT_DEVICES) for the two amp fractions, with the
# mixed-precision traffic terms of tag/cost/mixed_precision.py (16-bit activations, per-iteration weight casts,
# NCHW layout transposes, fp16 loss-scale pass; not fitted). Fit: coordinate search minimising the MAPE of
# predicted vs published samples/s (`tag bench --published --fit`), started from a joint grid over (e_conv,
# winograd_speedup, knee_intensity).
# Result (benchmarks/published.md): FP32 MAPE 14.1 % (ResNet-50 14.6, BERT-large 13.3), TF32 MAPE 12.9 %,
# leave-one-GPU-out FP32 MAPE 16.4 %; AMP MAPE 6.6 % on its 8 fit rows and 15.6 % on the 9 held-out rows
# (A100 80 GB, H100, A10, RTX 2080 Ti; the amp fractions end at the grid's 1.0: ResNet-50 AMP is memory-bound);
# out of sample (DGX-1 P100 1-GPU, no fitted row): VGG-16 +1 %,
# ResNet-152 +8 %, Inception-v3 +37 % (many 1x7 / 7x1 / small convolutions). 8-GPU DGX-1 scaling efficiency
# within 3 points (TF 1.1's ring rate fitted on VGG-16, tag/bench/published.py FIT_ROW).
# Known outlier: K80 (+90 %: Kepler-era cuDNN reaches far less of its boost-clock peak).


def _gbps_from_gbytes(gbytes_per_s: float) -> float:
    """Memory bandwidth in GB/s (10^9 bytes/s, as datasheets print it) -> Gb/s (10^9 bits/s)."""
    return gbytes_per_s * 8.0


# Device type name -> where its figures come from (one line; the comments beside `_TYPES` give the detail).
SOURCES: dict[str, str] = {}


def _dt(name, peak_tflops, memory_gb, mem_gbytes_per_s, kind="gpu", *, source: str, **extra) -> DeviceType:
    SOURCES[name] = source
    return DeviceType(name=name, peak_tflops=float(peak_tflops), memory_gb=float(memory_gb),
                      memory_bandwidth_gbps=_gbps_from_gbytes(mem_gbytes_per_s), kind=kind, extra=dict(extra))


_TYPES = [
    # NVIDIA Tesla P100 PCIe 12 GB datasheet: FP32 9.3 TFLOPS, FP16 18.7 TFLOPS (no tensor cores),
    # 12 GB CoWoS HBM2 at 549 GB/s.
    _dt("P100-12GB", 9.3, 12, 549, amp_tflops=18.7,
        source="NVIDIA Tesla P100 PCIe datasheet (12 GB)"),
    # Same datasheet, SXM2 16 GB (the DGX-1 board): FP32 10.6 TFLOPS, FP16 21.2 TFLOPS, HBM2 at 732 GB/s.
    _dt("P100-16GB", 10.6, 16, 732, amp_tflops=21.2,
        source="NVIDIA Tesla P100 datasheet (SXM2 16 GB)"),
    # NVIDIA Tesla V100 datasheet (SXM2): FP32 15.7 TFLOPS, tensor 125 TFLOPS, 16 GB HBM2 at 900 GB/s.
    _dt("V100-16GB", 15.7, 16, 900, amp_tflops=125.0,
        source="NVIDIA Tesla V100 datasheet (SXM2)"),
    # Same datasheet, 32 GB variant: same compute and bandwidth.
    _dt("V100-32GB", 15.7, 32, 900, amp_tflops=125.0,
        source="NVIDIA Tesla V100 datasheet (SXM2 32 GB)"),
    # NVIDIA GeForce GTX 1080 Ti specifications: 3584 CUDA cores at 1582 MHz boost -> 11.34 TFLOPS FP32,
    # 11 GB GDDR5X at 484 GB/s; GP102 runs FP16 at 1/64 rate (0.177 TFLOPS), so AMP does not help.
    _dt("GTX1080Ti-11GB", 11.34, 11, 484, amp_tflops=0.177,
        source="NVIDIA GeForce GTX 1080 Ti specifications (3584 cores x 1582 MHz boost x 2 FLOP)"),
    # NVIDIA GeForce RTX 2080 Ti (Turing whitepaper, reference boost): FP32 13.45 TFLOPS, FP16 tensor with
    # FP32 accumulate 26.9 TFLOPS (GeForce rate), 11 GB GDDR6 at 616 GB/s.
    _dt("RTX2080Ti-11GB", 13.45, 11, 616, amp_tflops=26.9,
        source="NVIDIA Turing architecture whitepaper (RTX 2080 Ti, reference boost)"),
    # NVIDIA T4 datasheet: FP32 8.1 TFLOPS, mixed precision FP16/FP32 65 TFLOPS, 16 GB GDDR6 at 320 GB/s.
    _dt("T4-16GB", 8.1, 16, 320, amp_tflops=65.0,
        source="NVIDIA T4 datasheet"),
    # NVIDIA A10 datasheet: FP32 31.2 TFLOPS, TF32 62.5, FP16 tensor 125 (dense), 24 GB GDDR6 at 600 GB/s.
    _dt("A10-24GB", 31.2, 24, 600, tf32_tflops=62.5, amp_tflops=125.0,
        source="NVIDIA A10 datasheet"),
    # AWS EC2 G5 (A10G): 24 GB GDDR6 at 600 GB/s, FP32 31.2 TFLOPS as the A10; its tensor peaks are lower
    # than the A10's and not on a public datasheet: ~35 TF32 / ~70 FP16 dense are estimates.
    _dt("A10G-24GB", 31.2, 24, 600, tf32_tflops=35.0, amp_tflops=70.0,
        source="AWS EC2 G5 (A10G) page; tensor peaks are estimates (not on a public datasheet)"),
    # NVIDIA L4 datasheet: FP32 30.3 TFLOPS, TF32 120 / FP16 242 with sparsity (60 / 121 dense),
    # 24 GB GDDR6 at 300 GB/s.
    _dt("L4-24GB", 30.3, 24, 300, tf32_tflops=60.0, amp_tflops=121.0,
        source="NVIDIA L4 datasheet (tensor peaks: half the sparsity figures)"),
    # NVIDIA A100 datasheet (SXM, 40 GB HBM2 at 1,555 GB/s): FP32 19.5, TF32 156, FP16 tensor 312 (dense).
    _dt("A100-40GB", 19.5, 40, 1555, tf32_tflops=156.0, amp_tflops=312.0,
        source="NVIDIA A100 datasheet (SXM 40 GB)"),
    # Same datasheet, 80 GB HBM2e at 2,039 GB/s.
    _dt("A100-80GB", 19.5, 80, 2039, tf32_tflops=156.0, amp_tflops=312.0,
        source="NVIDIA A100 datasheet (SXM 80 GB)"),
    # Same datasheet, PCIe boards (250 W / 300 W): same peaks; 40 GB at 1,555 GB/s, 80 GB at 1,935 GB/s.
    _dt("A100-PCIE-40GB", 19.5, 40, 1555, tf32_tflops=156.0, amp_tflops=312.0,
        source="NVIDIA A100 datasheet (PCIe 40 GB)"),
    _dt("A100-PCIE-80GB", 19.5, 80, 1935, tf32_tflops=156.0, amp_tflops=312.0,
        source="NVIDIA A100 datasheet (PCIe 80 GB)"),
    # NVIDIA H100 datasheet (SXM): FP32 67 TFLOPS, TF32 989 / FP16 1,979 with sparsity (494.5 / 989.5 dense),
    # 80 GB HBM3 at 3.35 TB/s.
    _dt("H100-80GB", 67.0, 80, 3350, tf32_tflops=494.5, amp_tflops=989.5,
        source="NVIDIA H100 datasheet (SXM; tensor peaks: half the sparsity figures)"),
    # Same datasheet, H100 PCIe: FP32 51 TFLOPS, TF32 756 / FP16 1,513 with sparsity (378 / 756 dense),
    # 80 GB HBM2e at 2.0 TB/s.
    _dt("H100-PCIE-80GB", 51.0, 80, 2000, tf32_tflops=378.0, amp_tflops=756.0,
        source="NVIDIA H100 datasheet (PCIe; tensor peaks: half the sparsity figures)"),
    # NVIDIA Tesla K80 datasheet, one GK210 die (a board holds two): FP32 4.37 TFLOPS at boost (8.73 per
    # board), 12 GB GDDR5 at 240 GB/s (480 per board).
    _dt("K80", 4.37, 12, 240,
        source="NVIDIA Tesla K80 datasheet (one GK210 die of the two on a board)"),
    # One CPU core running one thread: fixed nominal figures, not measured (plans stay deterministic):
    # ~0.05 TFLOPS FP32 (AVX2 FMA: 2 x 8 lanes x 2 FLOP x ~3 GHz = 96 GFLOP/s peak, about half reached),
    # ~12.5 GB/s of memory bandwidth for a single thread (100 Gb/s), 4 GB of memory set aside for it.
    # `tag profile` measures the real figures.
    _dt("cpu", 0.05, 4, 12.5, kind="cpu",
        source="nominal figures for one core running one thread (not measured; tag profile ops measures them)"),
]

CATALOG: dict[str, DeviceType] = {t.name: t for t in _TYPES}
