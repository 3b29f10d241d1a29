"""Run many `tag deploy` jobs in one torchrun launch: the deploy runtime without per-plan start-up.

    python -m torch.distributed.run --standalone --nproc-per-node N benchmarks/emulate/batch_worker.py JOBS.json [ROUNDS]

JOBS.json is a list of job pickles (`tag.deploy.job.prepare_job` + `save_job`, all with the same `nproc`).
Every rank runs each job as `tag.deploy.worker` / `tag.deploy.train.train_rank` do (`TorchProgram`,
`build_schedule`, `Comm`, `RankRuntime`; each step fenced by barriers, the slowest rank's wall time kept).
On a shared machine the load of other tenants drifts, so the jobs are run round-robin in ROUNDS rounds
(default 3), each round a fresh runtime, one untimed warm-up step and `job.steps - 1` timed steps; a plan's
figure is the median of all its timed steps. Rank 0 writes ``<job>.result.json`` next to each pickle:
``measured_step_ms`` (median wall), ``step_ms`` (all timed steps), ``cpu_ms`` (median over steps of the
largest per-rank thread CPU time: the work itself, without waiting or preemption), the losses of the
last round and ``phases_by_rank`` (per rank, the median over timed steps of each phase's wall and thread
CPU ms, `emulate.phases`). A failing job writes ``<job>.error`` and the batch goes on.

Every round starts with each model's reference step (`emulate.speed_probe`: the single-rank step the
profile's ``step`` block timed), on rank 0 alone at the batch's rows and then on every rank at once at
rows / ranks (as data-parallel ranks run); rank 0 writes the thread CPU ms per round to
``JOBS.json.reference.json`` ({model: {rows, together_rows, alone_cpu_ms, together_cpu_ms}}), the
machine's speed at measurement time for `fidelity.speed_from_reference`.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from emulate.phases import PHASES, instrument  # noqa: E402
from emulate.speed_probe import reference_runtime, step_cpu_ms  # noqa: E402


def _run_job(job, rank: int, model_proto) -> tuple[list[float], list[float], list[float], list[dict]]:
    """(wall ms per timed step, max-over-ranks CPU ms per timed step, losses, this rank's phase times per
    timed step (`emulate.phases`)) of one fresh runtime."""
    import torch.distributed as dist

    from tag.deploy.comm import Comm
    from tag.deploy.data import make_optimizer, synthetic_batch
    from tag.deploy.onnx_torch import TorchProgram
    from tag.deploy.runtime import RankRuntime
    from tag.deploy.schedule import build_schedule

    program = TorchProgram(model_proto, job.graph, seed=job.seed)
    s = build_schedule(job.graph, job.groups, job.strategy, job.device_machines, job.nproc, job.plan_path)
    # the process groups and runtime `tag.deploy.train.train_rank` makes (ZeRO units, shard replicas and peers)
    sets = [s.ranks_of(g) for g in range(len(s.groups))] + [u.ranks for u in s.zero_units]
    sets += [sg.peers(j) for sg in s.shards.values() for j in range(sg.k)]
    comm = Comm(rank, s.n_ranks, s.rank_machine, Comm.needed_sets(s.buckets, s.sfb, s.rank_machine) + sets, "cpu",
                [rep for sg in s.shards.values() for rep in sg.replicas])
    data, targets = synthetic_batch(job.graph, s.batch_size, job.seed)
    if s.pipeline is not None:  # a pipelined plan runs as `tag.deploy.train` runs it
        from tag.deploy.pipeline_runtime import PipelineRankRuntime as RankRuntime  # noqa: N814
    rt = RankRuntime(s, job.graph, program, rank, comm, data, targets, make_optimizer(job.training.optimizer, job.training.lr))
    timer = instrument(rt)
    walls, cpus, losses, phases = [], [], [], []
    for step in range(max(job.steps, 2)):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.thread_time()
        local = rt.step()
        c1, t1 = time.thread_time(), time.perf_counter()
        dist.barrier()
        wall = (time.perf_counter() - t0) * 1e3
        ph = timer.take((t1 - t0) * 1e3, (c1 - c0) * 1e3)
        losses.append(comm.sum_scalar(local))
        wall, cpu = comm.sum_scalar(wall, op="max"), comm.sum_scalar((c1 - c0) * 1e3, op="max")
        if step > 0:
            walls.append(wall)
            cpus.append(cpu)
            phases.append(ph)
    return walls, cpus, losses, phases


def _reference(model_path: str, rows: int, proto, rank: int, world: int) -> tuple[float, float]:
    """(rank 0's single-rank reference step at `rows` alone, the mean of every rank's running it at `rows` //
    `world` rows at the same time, as data-parallel ranks do): thread CPU ms of the step the profile's
    ``step`` block timed (`emulate.speed_probe`), measured now."""
    import torch.distributed as dist

    rt = reference_runtime(model_path, rows, proto)
    dist.barrier()
    alone = step_cpu_ms(rt) if rank == 0 else 0.0
    dist.barrier()
    rt = reference_runtime(model_path, max(rows // world, 1), proto)
    dist.barrier()
    mine = step_cpu_ms(rt)
    every = [None] * world
    dist.all_gather_object(every, mine)
    dist.barrier()
    return alone, sum(every) / world


def _median_phases(steps: list[dict]) -> dict:
    """{"wall"|"cpu": {phase: median ms over steps}} of one rank's per-step phase times."""
    return {clock: {k: statistics.median(st[clock][k] for st in steps) for k in PHASES} for clock in ("wall", "cpu")}


def main(jobs_file: str, rounds: int = 3) -> int:
    import onnx
    import torch
    import torch.distributed as dist

    from tag.deploy.job import load_job

    from tag.memory import keep_freed_memory
    from tag.profile.autogroup import apply_from_env

    apply_from_env()  # this rank's session's CPU share (`tag.profile.autogroup`; unset: as started)
    keep_freed_memory()  # as `tag deploy`'s ranks and `tag profile ops` run (tag.memory)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    with open(jobs_file) as f:
        paths = json.load(f)
    walls: dict = {p: [] for p in paths}
    cpus: dict = {p: [] for p in paths}
    losses: dict = {}
    phases: dict = {p: [] for p in paths}
    failed: set = set()
    protos: dict = {}
    models = {}  # model path -> global batch rows, from the first job of the model
    for path in paths:
        job = load_job(path)
        models.setdefault(job.model_path, sum(job.strategy.decisions[0].rows))
    reference = {m: {"rows": r, "together_rows": max(r // world, 1), "alone_cpu_ms": [], "together_cpu_ms": []}
                 for m, r in models.items()}
    for _ in range(rounds):
        for m, r in models.items():
            if m not in protos:
                protos[m] = onnx.load(m)
            alone, together = _reference(m, r, protos[m], rank, world)
            reference[m]["alone_cpu_ms"].append(alone)
            reference[m]["together_cpu_ms"].append(together)
        for path in paths:
            if path in failed:
                continue
            try:
                job = load_job(path)
                if job.nproc != world:
                    raise RuntimeError(f"job of {job.nproc} ranks in a launch of {world}")
                if job.model_path not in protos:
                    protos[job.model_path] = onnx.load(job.model_path)
                w, c, l, ph = _run_job(job, rank, protos[job.model_path])
                phases[path] += ph
                walls[path] += w
                cpus[path] += c
                losses[path] = l
            except Exception as e:  # noqa: BLE001 - recorded per job; the other ranks fail the same job alike
                failed.add(path)
                with open(f"{path}.error", "w") as f:
                    f.write(f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            dist.barrier()
    mine = {p: _median_phases(v) for p, v in phases.items() if v and p not in failed}
    by_rank = [None] * world
    dist.all_gather_object(by_rank, mine)
    if rank == 0:
        with open(jobs_file + ".reference.json", "w") as f:
            json.dump(reference, f)
        for path in paths:
            if path in failed or not walls[path]:
                continue
            with open(path + ".result.json", "w") as f:
                json.dump({"measured_step_ms": statistics.median(walls[path]), "step_ms": walls[path],
                           "cpu_ms": statistics.median(cpus[path]), "losses": losses[path],
                           "phases_by_rank": [r.get(path) for r in by_rank]}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3))
