"""Timing helpers and machine micro-benchmarks: median of repeats after warm-up; peak matmul and copy rates.

Every measurement runs under the intra-op threads the caller set (`torch.set_num_threads`); on CUDA the
device is synchronised around each timed call. Times are in ms, rates in units named by the keys, on the clock
`set_clock` chose: ``wall`` (`time.perf_counter_ns`, the default) or ``thread`` (`time.thread_time_ns`: the
calling thread's CPU time, the op's own work on a one-thread CPU rank, without the time the scheduler gave the
core to another process; `tag profile ops` uses it for one-thread CPU profiles).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable

CLOCKS = {"wall": time.perf_counter_ns, "thread": time.thread_time_ns}
_clock = {"name": "wall"}


def set_clock(name: str) -> None:
    """Time every later measurement on clock `name` (a key of `CLOCKS`)."""
    if name not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {name!r}")
    _clock["name"] = name


def clock_name() -> str:
    """The clock measurements run on now (`set_clock`)."""
    return _clock["name"]


def now_ns() -> int:
    """The current reading of the chosen clock, ns."""
    return CLOCKS[_clock["name"]]()


def sync(device) -> None:
    """Wait for queued work on `device` (a no-op on CPU)."""
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        torch.cuda.synchronize(device)


def times_ms(fn: Callable[[], object], *, warmup: int, repeats: int, device="cpu",
             setup: Callable[[], object] | None = None) -> list[float]:
    """Wall times of `repeats` timed calls of ``fn(setup())`` (or ``fn()``) after `warmup` untimed ones, ms.

    `setup` runs untimed before each call and its result is passed to `fn` (e.g. a fresh forward whose
    backward is timed).
    """
    times = []
    for k in range(warmup + repeats):
        arg = setup() if setup is not None else None
        sync(device)
        t0 = now_ns()
        fn(arg) if setup is not None else fn()
        sync(device)
        t1 = now_ns()
        if k >= warmup:
            times.append((t1 - t0) / 1e6)
    return times


def median_ms(fn: Callable[[], object], *, warmup: int, repeats: int, device="cpu",
              setup: Callable[[], object] | None = None) -> float:
    """Median of `times_ms` (the figure every op and group time is), ms."""
    return float(statistics.median(times_ms(fn, warmup=warmup, repeats=repeats, device=device, setup=setup)))


def matmul_gflops(device="cpu", n: int = 512, repeats: int = 20) -> float:
    """Peak FP32 throughput: an n x n x n matmul (2 n^3 FLOP) at its fastest of `repeats` calls after one
    warm-up, 10^9 FLOP/s (the fastest call, as a peak is; on a shared machine the median mostly measures
    the other tenants)."""
    import torch

    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    ms = min(times_ms(lambda: torch.mm(a, b), warmup=1, repeats=repeats, device=device))
    return 2.0 * n ** 3 / (ms / 1e3) / 1e9


def copy_gbytes_per_s(device="cpu", nbytes: int = 32 * 2 ** 20, repeats: int = 20) -> float:
    """Memory bandwidth of a big tensor copy (reads and writes `nbytes` each) at its fastest of `repeats`
    calls after one warm-up, 10^9 bytes/s."""
    import torch

    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    ms = min(times_ms(lambda: dst.copy_(src), warmup=1, repeats=repeats, device=device))
    return 2.0 * nbytes / (ms / 1e3) / 1e9


def dispatch_ms(device="cpu", calls: int = 2000) -> float:
    """Per-op launch/dispatch overhead: the mean time of an add on a one-element tensor over `calls`
    calls (median of three such loops), ms."""
    import torch

    x = torch.ones(1, device=device)
    y = torch.ones(1, device=device)
    for _ in range(100):
        torch.add(x, y)

    def many():
        for _ in range(calls):
            torch.add(x, y)

    return median_ms(many, warmup=0, repeats=3, device=device) / calls


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (else platform.processor())."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def total_memory_gb() -> float:
    """Physical memory of this machine, 10^9 bytes (0 if unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return 0.0


def machine_block(device="cpu", threads: int = 1, *, quick: bool = False) -> dict:
    """The machine's description and measured figures for a profile's "machine" block.

    Keys: ``host``, ``cpu``, ``cores``, ``memory_gb``, ``torch``, ``device``, ``threads``,
    ``matmul_gflops`` (fastest of 20 512^3 matmuls), ``copy_gbytes_per_s`` (fastest of 20 32 MiB copies),
    ``matmul_n``, ``copy_bytes``, ``dispatch_ms``, and the same
    figures in topology units: ``peak_tflops`` and ``memory_bandwidth_gbps`` (10^9 bits/s).
    `quick` shrinks the matmul and copy (for tests).
    """
    import torch

    n, nbytes = (256, 4 * 2 ** 20) if quick else (512, 32 * 2 ** 20)
    gflops = matmul_gflops(device, n=n, repeats=5 if quick else 20)
    gbytes = copy_gbytes_per_s(device, nbytes=nbytes, repeats=5 if quick else 20)
    out = {
        "host": platform.node(),
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 1,
        "memory_gb": round(total_memory_gb(), 3),
        "torch": torch.__version__,
        "device": str(device),
        "threads": int(threads),
        "matmul_n": n,
        "matmul_gflops": round(gflops, 3),
        "copy_bytes": nbytes,
        "copy_gbytes_per_s": round(gbytes, 3),
        "dispatch_ms": round(dispatch_ms(device, calls=200 if quick else 2000), 6),
        "peak_tflops": round(gflops / 1e3, 6),
        "memory_bandwidth_gbps": round(gbytes * 8.0, 3),
    }
    if str(device).startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def device_type_entry(machine: dict, memory_gb: float | None = None) -> dict:
    """A topology.json ``device_types`` entry from a measured machine block (peak, bandwidth, memory)."""
    entry = {"peak_tflops": machine["peak_tflops"], "memory_bandwidth_gbps": machine["memory_bandwidth_gbps"]}
    if memory_gb:
        entry["memory_gb"] = round(memory_gb, 3)
    return entry
