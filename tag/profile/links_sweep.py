"""The link sweeps every rank runs inside an initialised torch.distributed group.

1. Every rank reports its host; ranks on one host are one machine (machines in order of their first rank).
2. The first rank of each machine measures the machine (`tag.profile.timing.machine_block`) while the
   others wait.
3. Point-to-point ping-pong, one pair at a time: inside each machine with two or more ranks its first two
   ranks, and between the first ranks of every pair of machines. For each message size the sender times
   `warmup` + `repeats` round trips (send then receive the same size back); one-way time = median / 2.
4. The all-reduce `tag deploy` runs (`Comm.sum_over`, "ring": the backend's ring all_reduce) of each
   size over all ranks (median over `repeats`, after a barrier each time; and the fastest of the repeats, which a
   call stalled by the scheduler or a CPU quota cannot inflate: the barrier figure, `tag.profile.links.barrier_ms`).

`run_rank` returns the gathered result on rank 0 (None elsewhere): a plain dict, JSON-ready, ms and bytes.
"""

from __future__ import annotations

import platform
import statistics
import time
from dataclasses import asdict, dataclass, field

DEFAULT_SIZES_BYTES = [4, 1024, 16384, 262144, 1048576, 4194304, 16777216]


@dataclass
class LinkSettings:
    """What to sweep: message sizes (bytes, multiples of 4), repeats, device kind, threads."""

    sizes_bytes: list[int] = field(default_factory=lambda: list(DEFAULT_SIZES_BYTES))
    warmup: int = 2
    repeats: int = 5
    device: str = "cpu"  # "cpu" (gloo) or "cuda" (NCCL, one GPU per local rank)
    device_type: str = "cpu"
    threads: int = 1
    quick_machine: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def _machines(hosts: list[str]) -> list[list[int]]:
    """Ranks grouped by host, machines in order of their first rank."""
    order: dict[str, list[int]] = {}
    for r, h in enumerate(hosts):
        order.setdefault(h, []).append(r)
    return list(order.values())


def pairs_to_measure(machines: list[list[int]]) -> list[tuple[str, int, int]]:
    """(kind, rank a, rank b): the first two ranks of each machine ("intra"), first ranks of machine pairs ("inter")."""
    out = [("intra", m[0], m[1]) for m in machines if len(m) >= 2]
    for i in range(len(machines)):
        for j in range(i + 1, len(machines)):
            out.append(("inter", machines[i][0], machines[j][0]))
    return out


def _ping_pong_ms(dist, buf, peer: int, initiator: bool, warmup: int, repeats: int, device) -> float | None:
    from tag.profile.timing import sync

    times = []
    for k in range(warmup + repeats):
        sync(device)
        t0 = time.perf_counter_ns()
        if initiator:
            dist.send(buf, peer)
            dist.recv(buf, peer)
        else:
            dist.recv(buf, peer)
            dist.send(buf, peer)
        sync(device)
        if k >= warmup:
            times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times) / 2.0 if initiator else None


def run_rank(settings: LinkSettings) -> dict | None:
    """Run the sweeps on this rank of the default process group; the gathered result on rank 0."""
    import torch
    import torch.distributed as dist

    from tag.profile.timing import machine_block, sync

    torch.set_num_threads(settings.threads)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if settings.device.startswith("cuda"):
        import os
        device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
    hosts: list = [None] * world
    dist.all_gather_object(hosts, platform.node())
    machines = _machines(hosts)
    mine = None
    if any(m[0] == rank for m in machines):
        mine = machine_block(device, settings.threads, quick=settings.quick_machine)
        mine["device_type"] = settings.device_type  # each machine's own --device-type (heterogeneous clusters)
    blocks: list = [None] * world
    dist.all_gather_object(blocks, mine)

    p2p = []
    for kind, a, b in pairs_to_measure(machines):
        series = []
        for size in settings.sizes_bytes:
            buf = torch.zeros(max(size // 4, 1), device=device)
            dist.barrier()
            if rank in (a, b):
                t = _ping_pong_ms(dist, buf, b if rank == a else a, rank == a, settings.warmup, settings.repeats, device)
                if t is not None:
                    series.append(t)
        p2p.append({"kind": kind, "ranks": [a, b], "one_way_ms": series})
    gathered: list = [None] * world
    dist.all_gather_object(gathered, [e["one_way_ms"] for e in p2p])
    for k, e in enumerate(p2p):
        e["one_way_ms"] = gathered[e["ranks"][0]][k]

    from tag.deploy.comm import Comm

    comm = Comm(rank, world, [""] * world, [tuple(range(world))], device)  # the sum deploy runs (ring method)
    allreduce, fastest = [], []
    for size in settings.sizes_bytes:
        buf = torch.ones(max(size // 4, 1), device=device)
        times = []
        for k in range(settings.warmup + settings.repeats):
            dist.barrier()
            sync(device)
            t0 = time.perf_counter_ns()
            comm.sum_over(buf, "ring", tuple(range(world)), None)
            sync(device)
            if k >= settings.warmup:
                times.append((time.perf_counter_ns() - t0) / 1e6)
        allreduce.append(statistics.median(times))
        fastest.append(min(times))
    all_times: list = [None] * world
    dist.all_gather_object(all_times, [allreduce, fastest])
    if rank != 0:
        return None
    return {
        "world": world,
        "hosts": hosts,
        "machines": machines,
        "machine_blocks": [blocks[m[0]] for m in machines],
        "sizes_bytes": list(settings.sizes_bytes),
        "p2p": p2p,
        # a collective ends when its slowest rank does: the max over ranks of each median
        "allreduce_ms": [max(t[0][i] for t in all_times) for i in range(len(settings.sizes_bytes))],
        "allreduce_fastest_ms": [max(t[1][i] for t in all_times) for i in range(len(settings.sizes_bytes))],
        "backend": dist.get_backend(),
        "settings": settings.to_json(),
    }
