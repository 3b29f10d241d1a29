"""`tag profile links`: run the link sweeps on local ranks (or as one rank under torchrun), fit, and write a
complete topology.json of the devices the ranks ran on.

Topology written (every figure measured):

- ``device_types[<type>]``: per device type (each machine's first rank's ``--device-type``), the first such
  machine's measured ``peak_tflops`` (fastest 512^3 matmul on the rank's threads, or the device's),
  ``memory_bandwidth_gbps`` (fastest 32 MiB copy) and ``memory_gb`` (the machine's memory / its ranks);
- one machine per host, ``count`` = its ranks; ``intra_bandwidth_gbps`` / ``intra_latency_us`` from the
  alpha-beta fit of its intra pair (a machine with one rank keeps the defaults: nothing to measure);
- a link between every pair of machines with the fitted bandwidth and ``latency_us`` = fitted end-to-end
  latency minus the two device ports (``intra_latency_us / 2`` each, see `tag.topology.routing`), at least 0;
- ``x-measured``: the raw sweeps, fits, the all-reduce fit and every machine's block.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Callable

from tag.profile.fit import fit_p2p, fit_ring_allreduce
from tag.profile.links_sweep import LinkSettings
from tag.profile.timing import device_type_entry

POLL_S = 0.25
DISAGREE_FACTOR = 1.5  # --compare flags figures that differ by more than this factor either way


class LinksFailed(Exception):
    """A rank of the sweep failed or the sweep timed out (one-line message)."""


def under_torchrun() -> bool:
    """True when this process is a rank started by torchrun (its environment names rank and world)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def launch_local(settings: LinkSettings, nproc: int, timeout_s: float = 300.0,
                 tick: Callable[[float], None] | None = None) -> dict:
    """Run the sweeps on `nproc` local ranks with torchrun (the deploy launcher's command); rank 0's result.

    `tick(seconds)` is called while waiting (a progress bar); the ranks are killed after `timeout_s`.
    """
    from tag.deploy.torchrun import torchrun_command

    run_dir = tempfile.mkdtemp(prefix="tag-links-")
    try:
        cfg = os.path.join(run_dir, "config.json")
        with open(cfg, "w") as f:
            json.dump({"settings": settings.to_json(), "timeout_s": timeout_s}, f)
        cmd = torchrun_command(cfg, nproc, module="tag.profile.links_worker")
        env = dict(os.environ, OMP_NUM_THREADS=str(settings.threads), PYTHONWARNINGS="ignore")
        with open(os.path.join(run_dir, "torchrun.log"), "w") as log:
            # a process group of its own (killed as one on timeout) in the caller's session: with the kernel's
            # autogroup scheduling a new session would be a new CPU-share group, not the caller's priority
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    process_group=0)
            t0 = time.monotonic()
            while proc.poll() is None:
                time.sleep(POLL_S)
                if tick is not None:
                    tick(POLL_S)
                if time.monotonic() - t0 > timeout_s:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise LinksFailed(f"the sweep over {nproc} ranks did not finish in {timeout_s:g} s; killed its ranks")
        result_path = os.path.join(run_dir, "result.json")
        if proc.returncode == 0 and os.path.exists(result_path):
            with open(result_path) as f:
                return json.load(f)
        raise LinksFailed(_first_error(run_dir, nproc, proc.returncode))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _first_error(run_dir: str, nproc: int, code: int | None) -> str:
    for r in range(nproc):
        try:
            with open(os.path.join(run_dir, f"rank{r}.error")) as f:
                return f"rank {r} failed: {f.readline().strip()}"
        except OSError:
            continue
    try:
        with open(os.path.join(run_dir, "torchrun.log")) as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        lines = []
    return f"torchrun exited with code {code}" + (f": {lines[-1]}" if lines else "")


def fits(result: dict) -> dict:
    """Alpha-beta fits of a sweep result: per measured pair and of the all-reduce (JSON-ready)."""
    sizes = result["sizes_bytes"]
    pairs = []
    for e in result["p2p"]:
        f = fit_p2p(sizes, e["one_way_ms"])
        pairs.append({"kind": e["kind"], "ranks": e["ranks"], "latency_us": f.latency_us,
                      "bandwidth_gbps": f.bandwidth_gbps, "max_rel_error": f.max_rel_error})
    out = {"p2p": pairs}
    if result["world"] >= 2:
        f = fit_ring_allreduce(sizes, result["allreduce_ms"], result["world"])
        out["allreduce"] = {"ranks": result["world"], "hop_latency_us": f.latency_us,
                            "hop_bandwidth_gbps": f.bandwidth_gbps, "max_rel_error": f.max_rel_error}
    return out


COLLECTIVE_FIT_MIN_BYTES = 1 << 20  # sizes at or above this fit the ring's per-hop bandwidth


def collective_hop_gbps(topology: dict) -> float | None:
    """The measured ring all-reduce's per-hop bandwidth (10^9 bit/s) of a topology written by `tag profile
    links` (its ``x-measured`` block), fitted on the sizes of at least `COLLECTIVE_FIT_MIN_BYTES` (small
    sizes are latency-bound and noisy); None when the topology has no all-reduce measurement."""
    meas = topology.get("x-measured") or {}
    ar = (meas.get("fits") or {}).get("allreduce")
    sizes, times = meas.get("sizes_bytes") or [], meas.get("allreduce_ms") or []
    if not ar or len(sizes) != len(times):
        return None
    big = [(s, t) for s, t in zip(sizes, times) if s >= COLLECTIVE_FIT_MIN_BYTES]
    if len(big) < 2:
        return float(ar["hop_bandwidth_gbps"])
    f = fit_ring_allreduce([s for s, _ in big], [t for _, t in big], int(ar["ranks"]))
    return f.bandwidth_gbps


def collective_step_us(topology: dict) -> float | None:
    """The measured per-step latency (us) of the ring all-reduce of a topology written by `tag profile links`: with
    the per-hop rate B of `collective_hop_gbps`, each size S below `COLLECTIVE_FIT_MIN_BYTES` gives
    ``(t(S) - 2(n-1)/n x S / B) / 2(n-1)``; the median of those (at least 0). Small messages decide it: a bucket
    of a few kB costs one collective call's fixed work, which a least-squares line through sizes up to 16 MiB
    misses. None without an all-reduce measurement; the whole-sweep fit's ``hop_latency_us`` when no size is small.

    >>> t = {"x-measured": {"sizes_bytes": [4, 1000, 2 ** 20, 2 ** 21], "allreduce_ms": [0.5, 0.6, 1.0, 1.5],
    ...      "fits": {"allreduce": {"ranks": 2, "hop_latency_us": 1.0, "hop_bandwidth_gbps": 1.0}}}}
    >>> round(collective_step_us(t), 3)  # B = 2^20 B / 0.5 ms; steps (0.5 - 0.000002) / 2, (0.6 - 0.0005) / 2 ms
    274.88
    """
    meas = topology.get("x-measured") or {}
    ar = (meas.get("fits") or {}).get("allreduce")
    sizes, times = meas.get("sizes_bytes") or [], meas.get("allreduce_ms") or []
    if not ar or len(sizes) != len(times):
        return None
    n = int(ar["ranks"])
    gbps = collective_hop_gbps(topology)
    small = [(s, t) for s, t in zip(sizes, times) if s < COLLECTIVE_FIT_MIN_BYTES]
    if not small or not gbps:
        return float(ar["hop_latency_us"])
    from statistics import median

    from tag.cost.comm import bytes_per_ms, ring_allreduce_steps, ring_allreduce_volume_bytes

    steps = [(t - ring_allreduce_volume_bytes(s, n) / bytes_per_ms(gbps)) / ring_allreduce_steps(n) * 1e3
             for s, t in small]
    return max(0.0, median(steps))


def barrier_ms(topology: dict) -> float | None:
    """What a barrier over the measured ranks costs, ms: the all-reduce of the smallest size the sweep of a
    topology written by `tag profile links` timed, if it is at most 64 bytes; None otherwise. Its fastest repeat
    (``allreduce_fastest_ms``: each rank's fastest, the slowest rank's) where the sweep recorded it, else its median
    (``allreduce_ms``): a hot loop of calls on a CPU quota stalls whenever a rank's budget runs out, which a step's
    single barrier does not (benchmarks/fidelity.md, emulated runs E7 and E8).

    >>> meas = {"sizes_bytes": [4, 1024], "allreduce_ms": [3.3, 3.9]}
    >>> barrier_ms({"x-measured": meas}), barrier_ms({"x-measured": {**meas, "allreduce_fastest_ms": [0.21, 0.3]}})
    (3.3, 0.21)
    """
    meas = topology.get("x-measured") or {}
    sizes = meas.get("sizes_bytes") or []
    times = meas.get("allreduce_fastest_ms") or meas.get("allreduce_ms") or []
    if not sizes or len(sizes) != len(times) or min(sizes) > 64:
        return None
    return float(times[sizes.index(min(sizes))])


def measured_topology(result: dict, name: str = "measured") -> dict:
    """A complete topology.json object from a sweep result (see the module docstring)."""
    machines = result["machines"]
    blocks = result["machine_blocks"]
    f = fits(result)
    names = [f"m{i}" for i in range(len(machines))]
    machine_of = {r: i for i, m in enumerate(machines) for r in m}
    # each machine's device type: its first rank's --device-type (one name for all when they agree)
    dtypes = [b.get("device_type") or result["settings"]["device_type"] for b in blocks]
    topo = {"version": 1, "name": name, "device_types": {}, "machines": [], "links": []}
    for i, (dtype, block) in enumerate(zip(dtypes, blocks)):
        if dtype not in topo["device_types"]:  # measured on the first machine of that type
            entry = device_type_entry(block, block["memory_gb"] / len(machines[i]) if block.get("memory_gb") else None)
            entry["kind"] = "gpu" if result["settings"]["device"].startswith("cuda") else "cpu"
            topo["device_types"][dtype] = entry
    intra_lat = {}
    for i, m in enumerate(machines):
        spec = {"name": names[i], "devices": [{"type": dtypes[i], "count": len(m)}], "x-host": result["hosts"][m[0]]}
        pair = next((p for p in f["p2p"] if p["kind"] == "intra" and machine_of[p["ranks"][0]] == i), None)
        if pair is not None:
            spec["intra_bandwidth_gbps"] = round(pair["bandwidth_gbps"], 3)
            spec["intra_latency_us"] = round(pair["latency_us"], 3)
            intra_lat[i] = spec["intra_latency_us"]
        topo["machines"].append(spec)
    from tag.topology.schema import DEFAULT_INTRA_LATENCY_US

    for p in f["p2p"]:
        if p["kind"] != "inter":
            continue
        a, b = machine_of[p["ranks"][0]], machine_of[p["ranks"][1]]
        ports = (intra_lat.get(a, DEFAULT_INTRA_LATENCY_US) + intra_lat.get(b, DEFAULT_INTRA_LATENCY_US)) / 2.0
        topo["links"].append({"between": [names[a], names[b]], "bandwidth_gbps": round(p["bandwidth_gbps"], 3),
                              "latency_us": round(max(p["latency_us"] - ports, 0.0), 3)})
    if not topo["links"]:
        del topo["links"]
    topo["x-measured"] = {"backend": result["backend"], "sizes_bytes": result["sizes_bytes"], "p2p": result["p2p"],
                          "allreduce_ms": result["allreduce_ms"], "fits": f, "machines": blocks,
                          **({"allreduce_fastest_ms": result["allreduce_fastest_ms"]}
                             if result.get("allreduce_fastest_ms") else {}),
                          "settings": result["settings"]}
    return topo


def compare(measured: dict, hand_path: str, factor: float = DISAGREE_FACTOR) -> list[dict]:
    """Where a hand-written topology disagrees with a measured one (both parsed as Clusters).

    One row per compared figure: ``what``, ``hand``, ``measured``, ``ratio`` (hand / measured) and
    ``disagrees`` (ratio beyond `factor` either way, or a different device count). Pairs are the measured
    ones, matched by device position in topology order; device types by each device's type.
    """
    from tag.topology import load_topology
    from tag.topology.loader import parse_topology

    hand = load_topology(hand_path)
    meas = parse_topology(measured, "<measured>")
    rows = []

    def row(what, h, m):
        ratio = h / m if m else float("inf")
        rows.append({"what": what, "hand": h, "measured": m, "ratio": ratio,
                     "disagrees": not (1.0 / factor <= ratio <= factor)})

    if hand.n_devices != meas.n_devices:
        rows.append({"what": "devices", "hand": hand.n_devices, "measured": meas.n_devices,
                     "ratio": hand.n_devices / meas.n_devices, "disagrees": True})
    seen_types = set()
    for d in meas.devices[: hand.n_devices]:
        h = hand.devices[d.index].type
        if (h.name, d.type.name) in seen_types:
            continue
        seen_types.add((h.name, d.type.name))
        row(f"{h.name} peak_tflops", h.peak_tflops, d.type.peak_tflops)
        row(f"{h.name} memory_bandwidth_gbps", h.memory_bandwidth_gbps, d.type.memory_bandwidth_gbps)
    for p in measured["x-measured"]["fits"]["p2p"]:
        a, b = p["ranks"]
        if max(a, b) >= hand.n_devices:
            continue
        pair = f"{meas.devices[a].id}<->{meas.devices[b].id}"
        row(f"{pair} bandwidth_gbps", float(hand.bandwidth_gbps[a, b]), float(meas.bandwidth_gbps[a, b]))
        row(f"{pair} latency_us", float(hand.latency_us[a, b]), float(meas.latency_us[a, b]))
    return rows

