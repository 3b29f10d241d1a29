"""Horovod on 512 GPUs as Horovod ran it: tensor fusion on a cycle, NCCL2's flat ring, the RoCE rate.

The published rows (`tag/bench/data/published/horovod512.json`, source in the file): 128 servers x 4 Pascal GPUs on
a RoCE-capable 25 Gbit/s network, tf_cnn_benchmarks at 64 images per GPU, scaling efficiency 90% (Inception-v3,
ResNet-101) and 68% (VGG-16). Horovod of that time (v0.11-0.12, early 2018) synced like this:

* **Gradients become ready** in reverse backward order. On one GPU (the catalog cost model, the simulator's
  single-device iteration) group g's gradient is ready at ``F + sum_{h >= g} bwd_h``, F the whole forward.
* **Tensor fusion on a cycle** (horovod ``docs/tensor-fusion.rst``; defaults then ``HOROVOD_FUSION_THRESHOLD`` =
  64 MiB, ``HOROVOD_CYCLE_TIME`` = 5 ms, changed to 128 MiB / 1 ms only in v0.21): a background thread wakes at
  cycle starts; at each it takes every gradient ready by then, packs them in ready order into fusion buffers of at
  most 64 MiB (a larger tensor goes alone), and all-reduces the buffers one after another; the next cycle starts
  ``cycle`` after this one started, or when its work ends if later (`fusion_schedule`). While idle, cycles
  start every ``cycle``; where they fall in the iteration is arbitrary, so the prediction is the mean over the
  iteration starting 0, 1, ..., 4 ms after a cycle start (`PHASES`).
* **NCCL2's flat ring** over all n = 512 GPUs (hierarchical all-reduce came to Horovod later, NCCL's tree in
  NCCL 2.4, 2019): one ring through every machine, each fused buffer of S bytes takes (`tag.sim.algorithms
  .algorithm_ms` "ring" on the 128 x 4 cluster, which is `tag.cost.comm.ring_allreduce_ms` when the NIC bounds):
  ``2(n-1)/n x S / B + 2(n-1) x alpha``, B the NIC rate (25 Gbit/s, the published network), alpha the
  latency of one ring step across machines.
* **Iteration** = the single-GPU iteration T1 plus what the last all-reduce ends past the backward:
  ``T_n = T1 + max(0, end of the last all-reduce - (F + sum bwd))`` (the optimizer updates stay after it, as on one
  GPU); scaling efficiency = 100 x T1 / T_n (samples/s per GPU at 512 over samples/s on one GPU, same batch per GPU).

**One fitted constant**: alpha, the per-step latency of NCCL2's ring across machines, fitted on the VGG-16 row
(the bandwidth- and step-bound one: its 553 MB of gradients cross the ring in about nine 64 MiB buffers of 1,022
steps each); Inception-v3 and ResNet-101 are out-of-sample checks. The fitted value is stated next to NCCL's own
figure: tuning.cc's Ring/Simple network step, 14 us (`tag.cost.nccl.HW_LAT_US`), which today's NCCL uses with
per-step pipelining that NCCL 2.1 lacked. Not modelled: Horovod's negotiation round through rank 0, the copies
into and out of the fusion buffer, compute slowed by NCCL's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tag.bench.data import published_table
from tag.bench.published_rows import read_table

MIB = 2 ** 20
# Horovod's defaults until v0.21 (docs/tensor-fusion.rst; CHANGELOG v0.21.0: "Changed default cycle time from 5ms
# to 1ms and fusion threshold from 64MB to 128MB").
FUSION_BYTES = 64 * MIB
CYCLE_MS = 5.0
# Published model names -> graph keys (`tag.bench.published_predict.model_path`).
HOROVOD_MODELS = {"Inception-v3": "inception_v3", "ResNet-101": "resnet101", "VGG-16": "vgg16"}
FIT_ROW = "VGG-16"
PHASES = 5  # cycle phases averaged over (every 1 ms of the 5 ms cycle)


@dataclass(frozen=True)
class FusedAllreduce:
    """One fused buffer: when its all-reduce starts and ends (ms from the iteration start), its bytes and how many
    gradients (groups) it carries."""

    start_ms: float
    end_ms: float
    nbytes: float
    tensors: int


def fusion_schedule(ready: list[tuple[float, float]], allreduce_ms, cycle_ms: float = CYCLE_MS,
                    fusion_bytes: float = FUSION_BYTES) -> list[FusedAllreduce]:
    """Horovod's background loop over gradients `ready` = [(ready ms, bytes)] (module docstring): cycles start at
    multiples of `cycle_ms` while idle, each takes the gradients ready by its start, packs them in ready order into
    buffers of at most `fusion_bytes` (a larger gradient alone) and all-reduces the buffers back to back,
    `allreduce_ms(nbytes)` each; the next cycle starts at max(this start + cycle, end of its work).

    >>> ar = lambda s: 1.0 + s / 10.0  # 1 ms + 10 bytes per ms
    >>> [(f.start_ms, f.end_ms, f.nbytes) for f in fusion_schedule([(0.5, 10.0), (0.5, 10.0), (7.0, 30.0)], ar, 5.0, 25.0)]
    [(5.0, 8.0, 20.0), (10.0, 14.0, 30.0)]
    """
    todo = sorted((t, b) for t, b in ready if b > 0)
    out: list[FusedAllreduce] = []
    i, start = 0, 0.0
    while i < len(todo):
        if todo[i][0] > start:  # idle: the first cycle start at or after the next gradient
            k = -(-todo[i][0] // cycle_ms)
            start = max(start, k * cycle_ms)
            if todo[i][0] > start:  # rounding: one more cycle
                start += cycle_ms
        now = start
        while i < len(todo) and todo[i][0] <= start:
            nbytes, n = todo[i][1], 1
            i += 1
            while i < len(todo) and todo[i][0] <= start and nbytes + todo[i][1] <= fusion_bytes:
                nbytes += todo[i][1]
                n += 1
                i += 1
            end = now + allreduce_ms(nbytes)
            out.append(FusedAllreduce(now, end, nbytes, n))
            now = end
        start = max(start + cycle_ms, now)
    return out


def flat_ring_ms(nbytes: float, n: int, nic_gbps: float, step_latency_us: float) -> float:
    """NCCL2's flat ring all-reduce of `nbytes` over n GPUs whose ring crosses a NIC of `nic_gbps` per hop:
    2(n-1)/n x S / B + 2(n-1) x alpha, ms (`tag.cost.comm.ring_allreduce_ms`).

    >>> round(flat_ring_ms(64 * 2 ** 20, 512, 25.0, 10.0), 3)  # 2 x 511/512 x 64 MiB / 3.125 GB/s + 1022 x 10 us
    53.086
    """
    from tag.cost.comm import ring_allreduce_ms

    return ring_allreduce_ms(nbytes, n, nic_gbps, step_latency_us)


def horovod_cluster(machines: int, gpus_per_machine: int, device: str, nic_gbps: float, step_latency_us: float):
    """`machines` x `gpus_per_machine` GPUs of catalog type `device` behind one switch with `nic_gbps` NICs, a
    device-to-device route across machines having latency `step_latency_us` (device port 1 + NIC + NIC + port 1
    us: ``nic_latency_us = (alpha - 2) / 2``, `tag.topology.routing`)."""
    from tag.topology.loader import parse_topology

    nic_lat = max(0.0, (step_latency_us - 2.0) / 2.0)
    ms = [{"name": f"m{i}", "devices": [{"type": device, "count": gpus_per_machine}], "nic_bandwidth_gbps": nic_gbps,
           "nic_latency_us": nic_lat} for i in range(machines)]
    return parse_topology({"version": 1, "name": f"{machines}x{gpus_per_machine}x{device}", "machines": ms},
                          "<horovod cluster>")


@dataclass(frozen=True)
class ComputeProfile:
    """One GPU's iteration at the row's batch: T1 (simulated, ms), the end of the backward (ms) and each group's
    gradient as (ready ms, bytes) in reverse backward order."""

    iteration_ms: float
    backward_end_ms: float
    ready: tuple[tuple[float, float], ...]


@lru_cache(maxsize=None)
def compute_profile(key: str, device: str, batch_per_gpu: int, n_devices: int = 512) -> ComputeProfile:
    """The single-GPU schedule of model `key` (momentum SGD, the catalog roofline cost model) on the groups tag
    makes for `n_devices` devices: T1 from `tag.sim.simulate`, ready times from the same cost model's group times."""
    from tag.bench.published_predict import group_graph
    from tag.cost.roofline import RooflineCostModel
    from tag.search.baselines import dp_even
    from tag.sim import simulate
    from tag.strategy import TrainingConfig

    gg = group_graph(key, n_devices)
    training = TrainingConfig(optimizer="momentum")
    one = horovod_cluster(1, 1, device, 25.0, 10.0)
    cost = RooflineCostModel(gg, training)
    t1 = simulate(gg, one, cost, dp_even(gg, one, cost, training, batch_per_gpu), training).fit_iteration_ms
    dt = one.devices[0].type
    now = sum(cost.group_fwd_ms(g, dt, batch_per_gpu) for g in range(gg.n_groups))
    ready = []
    for g in range(gg.n_groups - 1, -1, -1):
        now += cost.group_bwd_ms(g, dt, batch_per_gpu)
        if gg.groups[g].param_bytes > 0:
            ready.append((now, float(gg.groups[g].param_bytes)))
    return ComputeProfile(t1, now, tuple(ready))


@dataclass(frozen=True)
class HorovodResult:
    """One published Horovod row and its prediction."""

    model: str
    gpus: int
    batch_per_gpu: int
    published_pct: float
    one_gpu_ms: float
    predicted_ms: float
    allreduces: int
    gradient_mb: float
    step_latency_us: float
    fitted: bool  # True on the row alpha was fitted on
    simulate_pct: float | None = None  # `tag simulate`'s dp-even (25 MiB buckets, algorithm by cost, overlapped)
    simulate_prop_pct: float | None = None  # the same for dp-proportional

    @property
    def predicted_pct(self) -> float:
        return 100.0 * self.one_gpu_ms / self.predicted_ms


def predict_horovod(prof: ComputeProfile, n: int, nic_gbps: float, step_latency_us: float,
                    cycle_ms: float = CYCLE_MS, fusion_bytes: float = FUSION_BYTES, phases: int = 1,
                    allreduce_ms=None) -> tuple[float, list[FusedAllreduce]]:
    """(T_n ms, the fused all-reduces of phase 0) of one iteration on n GPUs (module docstring); `allreduce_ms(nbytes)`
    defaults to `flat_ring_ms`. phases > 1: T_n is the mean over the cycle starting at the fractions
    0, 1/phases, ... of a cycle before the iteration (where Horovod's cycle falls in an iteration is arbitrary)."""
    ar = allreduce_ms or (lambda s: flat_ring_ms(s, n, nic_gbps, step_latency_us))
    total, first = 0.0, []
    for k in range(phases):
        shift = k * cycle_ms / phases  # the iteration starts `shift` after a cycle start
        fused = fusion_schedule([(t + shift, b) for t, b in prof.ready], ar, cycle_ms, fusion_bytes)
        total += max(0.0, fused[-1].end_ms - shift - prof.backward_end_ms) if fused else 0.0
        first = first or fused
    return prof.iteration_ms + total / phases, first


def fit_step_latency_us(prof: ComputeProfile, n: int, nic_gbps: float, target_pct: float,
                        lo: float = 0.0, hi: float = 200.0, steps: int = 40, phases: int = 1) -> float:
    """The ring step latency alpha (us) at which the predicted efficiency is `target_pct` (bisection: efficiency
    falls as alpha grows); `lo` or `hi` when the target lies outside."""
    def eff(a):
        return 100.0 * prof.iteration_ms / predict_horovod(prof, n, nic_gbps, a, phases=phases)[0]

    if eff(lo) <= target_pct:
        return lo
    if eff(hi) >= target_pct:
        return hi
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if eff(mid) > target_pct:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def simulate_pct(key: str, row: dict, step_latency_us: float, baseline: str = "dp-even",
                 sync: str | None = None, bucket_mb: float | None = None) -> float:
    """`tag simulate --baseline NAME`'s scaling efficiency on the row's cluster, 100 x T1 / T_n (dp-even and
    dp-proportional: 25 MiB buckets, each bucket's algorithm chosen by cost as today's NCCL chooses ring / tree /
    hierarchical, overlapped with the backward). `sync` / `bucket_mb` override every replicated group's sync and
    the bucket cap (e.g. "ring", 0: one flat ring per group, version 1's data parallelism)."""
    from dataclasses import replace

    from tag.bench.published_predict import group_graph
    from tag.cost.roofline import RooflineCostModel
    from tag.search.baselines import BASELINES
    from tag.sim import simulate
    from tag.strategy import Strategy, TrainingConfig

    n = row["machines"] * row["gpus_per_machine"]
    b = row["per_gpu_batch"]
    gg = group_graph(key, n)
    training = TrainingConfig(optimizer="momentum")
    cl = horovod_cluster(row["machines"], row["gpus_per_machine"], row["device"], row["nic_gbps"], step_latency_us)
    cost = RooflineCostModel(gg, training)
    st = BASELINES[baseline](gg, cl, cost, training, b * n)
    if sync is not None or bucket_mb is not None:
        decs = tuple(d if d.sync is None or sync is None else replace(d, sync=sync) for d in st.decisions)
        st = Strategy(decs, st.bucket_mb if bucket_mb is None else bucket_mb)
    t = simulate(gg, cl, cost, st, training).fit_iteration_ms
    return 100.0 * compute_profile(key, row["device"], b, n).iteration_ms / t


def horovod_results(with_simulate: bool = False) -> list[HorovodResult]:
    """Every row of horovod512.json predicted (module docstring): alpha fitted on FIT_ROW, held for the others.
    with_simulate: also `tag simulate`'s dp-even and dp-proportional efficiency on the same cluster."""
    out = []
    for row in read_table(published_table("horovod512.json")):
        n = row["machines"] * row["gpus_per_machine"]
        b = row["per_gpu_batch"]
        profs = {name: compute_profile(HOROVOD_MODELS[name], row["device"], b, n)
                 for name in row["scaling_efficiency_pct"] if name in HOROVOD_MODELS}
        alpha = fit_step_latency_us(profs[FIT_ROW], n, row["nic_gbps"], row["scaling_efficiency_pct"][FIT_ROW],
                                    phases=PHASES)
        for name, prof in profs.items():
            t, fused = predict_horovod(prof, n, row["nic_gbps"], alpha, phases=PHASES)
            sims = [simulate_pct(HOROVOD_MODELS[name], row, alpha, base) if with_simulate else None
                    for base in ("dp-even", "dp-proportional")]
            out.append(HorovodResult(name, n, b, float(row["scaling_efficiency_pct"][name]), prof.iteration_ms, t,
                                     len(fused), sum(x[1] for x in prof.ready) / 1e6, alpha, name == FIT_ROW, *sims))
    return out
