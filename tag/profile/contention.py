"""Measure what ranks running at once on this machine do to each other: the profile's ``contention`` block.

`tag profile ops` (on a CPU) starts `ranks` local processes (gloo, one thread each, as deploy runs its ranks) and
measures, for `tag.cost.contention` to apply to every plan predicted with the profile:

1. **handoff**: two ranks pass a small token back and forth, each computing 2 ms of thread CPU time before passing
   it on (as training ranks do between messages); per handoff (round-trip wall - both sides' compute wall) / 2,
   median of 40. A rank that waited resumes only when the scheduler gives it a core back; a hot ping-pong (what
   `tag profile links` times) does not see that.
2. **stretch**: wall / thread-CPU ms of 40 ms of compute with one rank computing while the others wait
   (``alone_stretch``, median of 3 per rank) and with every rank computing at once (``together_stretch``, median
   of 5); means over the ranks. Other tenants of the machine and ranks outnumbering cores show here.
3. **call cost** (``call_ms``): every rank computes at once, then makes one small call (1 KiB): gloo's
   ``all_reduce`` (``allreduce``, what deploy's ``ring`` sums and the step's closing barrier call) after
   `CALL_WORK_MS` ["allreduce"] of thread CPU time, as a bucket sum or the barrier follows a backward or an update
   of several ms, or a point-to-point exchange with its ring neighbours (``p2p``: isend to the next rank, irecv from
   the previous, both waited; what deploy's tree, ps and ZeRO collectives and pipeline exchanges are made of on CPU
   ranks) after `CALL_WORK_MS` ["p2p"], as a ZeRO-3 gather follows one group's pass. Per call: the ranks' mean of
   (wall from a common start to the call's end - the rank's own compute wall); per kind the **mean** of 40, not the
   median: a step makes several such calls and pays each one's stalls, and the longer the ranks computed, the
   further apart their compute ends (figures: benchmarks/fidelity.md, runs P and Q). It holds what a hot loop of
   calls (`tag profile links`) does not: the ranks' compute ending at different moments, their threads waking up.
4. **speed**: the model's own deploy step (`tag.profile.step`'s single-rank runtime: every group, `rows` rows,
   the profile's optimizer) in thread-CPU ms, on rank 0 alone and on every rank at once, alternated `SPEED_TRIALS`
   times after a warm-up step; ``together_speed`` = median together / median alone (shared caches and memory bandwidth: a
   memory-bound model's ranks slow each other down in CPU time too).

It also records ``cores``, the cores this process may run on (`os.sched_getaffinity`): ranks that fill them leave
no core for the runtime's sync threads (`tag.cost.contention.sums_overlap`).

Times use the profile's clock for nothing here: stretches are wall over thread CPU time by definition, the speed
is thread CPU time.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

HANDOFF_WORK_MS = 2.0
CALL_WORK_MS = {"allreduce": 10.0, "p2p": 2.0}  # thread CPU ms each rank computes before the call, per kind
CALL_BYTES = 1024
CALL_TRIALS = 40
STRETCH_WORK_MS = 40.0
SPEED_TRIALS = 5  # alone / together step pairs of the speed probe


def _work(a, ms: float) -> float:
    """Compute (matmuls) until `ms` of thread CPU time passed; the wall ms it took."""
    t, w = time.thread_time(), time.perf_counter()
    while (time.thread_time() - t) * 1e3 < ms:
        a @ a
    return (time.perf_counter() - w) * 1e3


def _handoff_and_stretch(dist, torch, rank: int, world: int) -> tuple[float, float, float]:
    """(median handoff ms (rank 0's figure), this rank's together stretch, this rank's alone stretch)."""
    tok = torch.zeros(256)
    a = torch.randn(128, 128)

    def trial(ms: float) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        spent = 0.0
        if rank == 0:
            spent += _work(a, ms)
            dist.send(tok, 1)
            dist.recv(tok, 1)
        elif rank == 1:
            dist.recv(tok, 0)
            spent += _work(a, ms)
            dist.send(tok, 0)
        wall = (time.perf_counter() - t0) * 1e3
        s = torch.tensor([spent], dtype=torch.float64)
        dist.all_reduce(s)
        return (wall - float(s)) / 2

    for _ in range(5):
        trial(0.0)
    handoff = statistics.median(trial(HANDOFF_WORK_MS) for _ in range(40))
    together = []
    for _ in range(5):
        dist.barrier()
        together.append(_work(a, STRETCH_WORK_MS) / STRETCH_WORK_MS)
    alone = []
    for i in range(world):
        for _ in range(3):
            dist.barrier()
            if rank == i:
                alone.append(_work(a, STRETCH_WORK_MS) / STRETCH_WORK_MS)
                for j in range(world):
                    if j != i:
                        dist.send(tok, j)
            else:
                dist.recv(tok, i)
    return handoff, statistics.median(together), statistics.median(alone)


def _call_costs(dist, torch, rank: int, world: int) -> dict[str, float]:
    """{"allreduce": ms, "p2p": ms}: one small call right after every rank computed (module docstring, 3)."""
    buf = torch.zeros(CALL_BYTES // 4)
    a = torch.randn(128, 128)
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def p2p():
        works = [dist.isend(buf, nxt), dist.irecv(torch.empty_like(buf), prv)]
        for w in works:
            w.wait()

    calls = {"allreduce": lambda: dist.all_reduce(buf), "p2p": p2p}
    per: dict[str, list[float]] = {kind: [] for kind in calls}
    for k in range(5 + CALL_TRIALS):  # the kinds alternate, so a change of the machine's load hits both alike
        for kind, call in calls.items():
            dist.barrier()
            t0 = time.perf_counter()
            spent = _work(a, CALL_WORK_MS[kind])
            call()
            mine = torch.tensor([(time.perf_counter() - t0) * 1e3 - spent], dtype=torch.float64)
            dist.all_reduce(mine)
            if k >= 5:
                per[kind].append(float(mine) / world)
    return {kind: max(0.0, statistics.mean(v)) for kind, v in per.items()}


def _speed(dist, rank: int, world: int, rt) -> tuple[float, float]:
    """(median step CPU ms on rank 0 alone, median step CPU ms of this rank with every rank stepping)."""
    import torch

    tok = torch.zeros(1)

    def step_ms() -> float:
        c0 = time.thread_time()
        rt.step()
        return (time.thread_time() - c0) * 1e3

    step_ms()  # warm-up
    alone, together = [], []
    for _ in range(SPEED_TRIALS):
        dist.barrier()
        if rank == 0:
            alone.append(step_ms())
            for j in range(1, world):
                dist.send(tok, j)
        else:
            dist.recv(tok, 0)
        dist.barrier()
        together.append(step_ms())
    return (statistics.median(alone) if alone else 0.0), statistics.median(together)


def _rank_main(rank: int, world: int, init_file: str, spec: dict, out: str) -> None:
    import torch
    import torch.distributed as dist

    from tag.deploy.rank_exit import exit_rank

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        handoff, together_stretch, alone_stretch = _handoff_and_stretch(dist, torch, rank, world)
        calls = _call_costs(dist, torch, rank, world)
        import onnx

        from tag.profile.step import _single_rank_runtime

        rt = _single_rank_runtime(onnx.load(spec["model_path"]), spec["graph"], spec["groups"], spec["rows"],
                                  spec["seed"], spec["optimizer"], spec["lr"])
        alone_ms, together_ms = _speed(dist, rank, world, rt)
        mine = torch.tensor([together_stretch, alone_stretch, alone_ms, together_ms], dtype=torch.float64)
        every = [torch.zeros(4, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(every, mine)
        if rank == 0:
            rows = [[float(x) for x in t] for t in every]
            with open(out, "w") as f:
                json.dump({"handoff_ms": handoff, "call_ms": calls, "by_rank": rows}, f)
    finally:
        dist.destroy_process_group()
    exit_rank()


def measure_contention(model_path: str, graph, groups: list[list[int]], rows: int, *, ranks: int, seed: int = 0,
                       optimizer: str = "adam", lr: float = 1e-3, clock: str = "thread") -> dict:
    """The profile's ``contention`` block (module docstring) from `ranks` >= 2 local processes stepping `graph`'s
    `groups` at `rows` rows each. Keys: clock, ranks, rows, handoff_ms, alone_stretch, together_stretch,
    together_speed, alone_step_ms, together_step_ms, call_ms ({"allreduce": ms, "p2p": ms}), cores (ms; ratios
    dimensionless)."""
    import torch.multiprocessing as mp

    work = tempfile.mkdtemp(prefix="tag-contention-")
    init_file, out = os.path.join(work, "init"), os.path.join(work, "result.json")
    spec = {"model_path": model_path, "graph": graph, "groups": groups, "rows": int(rows), "seed": seed,
            "optimizer": optimizer, "lr": lr}
    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the children's thread pools, as deploy's ranks
    try:
        mp.start_processes(_rank_main, args=(ranks, init_file, spec, out), nprocs=ranks, join=True,
                           start_method="spawn")
    finally:
        if old is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = old
    with open(out) as f:
        res = json.load(f)
    by_rank = res["by_rank"]
    alone_ms = by_rank[0][2]
    together_ms = statistics.mean(r[3] for r in by_rank)
    return {"clock": clock, "ranks": int(ranks), "rows": int(rows), "handoff_ms": float(res["handoff_ms"]),
            "alone_stretch": statistics.mean(r[1] for r in by_rank),
            "together_stretch": statistics.mean(r[0] for r in by_rank),
            "together_speed": together_ms / alone_ms if alone_ms > 0 else 1.0,
            "alone_step_ms": alone_ms, "together_step_ms": together_ms,
            "call_ms": {k: float(v) for k, v in res["call_ms"].items()}, "cores": usable_cores()}


BUSY_STRETCH = 1.15  # wall / thread CPU ms of a probe rank's compute above this (`busy_warning`): others hold cores


def busy_warning(terms) -> str | None:
    """The warning for a contention probe (`tag.cost.contention.ContentionTerms`) that ran on a busy machine, else
    None. On a quiet machine a rank computing alone gets its core (wall / thread CPU time ~1.0), and so does each
    of the probe's ranks computing together when they are no more than the cores; a stretch above BUSY_STRETCH
    (together: above BUSY_STRETCH x ranks / cores when the ranks outnumber the cores) means other processes took
    cores, so the profile's terms (and the plan `tag plan` writes for this machine from them) describe that load.

    >>> from tag.cost.contention import ContentionTerms as T
    >>> busy_warning(T(2, 16, 0.1, 1.002, 1.003, 1.0, cores=2)) is None
    True
    >>> busy_warning(T(2, 16, 0.1, 1.6, 1.6, 1.0, clock="wall")) is None  # a wall-clock profile has no stretch
    True
    >>> "busy machine: one rank computing alone got 1/1.62 of its core" in busy_warning(T(2, 16, 0.1, 1.625, 2.9, 1.0))
    True
    >>> "2 ranks computing together each got 1/2.47 of a core" in busy_warning(T(2, 16, 0.1, 1.05, 2.47, 1.0, cores=2))
    True
    >>> busy_warning(T(4, 16, 0.1, 1.05, 2.1, 1.0, cores=2)) is None  # 4 ranks on 2 cores: 2.1 < 1.15 x 2
    True
    """
    if terms.clock != "thread":
        return None
    if terms.alone_stretch > BUSY_STRETCH:
        what = f"one rank computing alone got 1/{terms.alone_stretch:.2f} of its core"
    elif terms.together_stretch > BUSY_STRETCH * max(1.0, terms.ranks / (terms.cores or terms.ranks)):
        what = f"{terms.ranks} ranks computing together each got 1/{terms.together_stretch:.2f} of a core"
    else:
        return None
    return (f"the contention probe ran on a busy machine: {what} (other processes use the cores), so the "
            "profile's contention terms, and the plan tag plan picks for this machine from them, describe that "
            "load; profile again when the machine is quiet")


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; os.cpu_count() where affinity is not offered)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
