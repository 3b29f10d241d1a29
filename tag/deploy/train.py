"""Train a plan for some steps on this rank: the loop the worker and the tests share.

`train_rank` builds the rank's runtime, runs `steps` steps and returns the global loss of every step
(summed over ranks) and the step wall time (max over ranks, each step fenced by barriers).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from tag.deploy.comm import Comm
from tag.deploy.data import make_optimizer, synthetic_batch
from tag.deploy.runtime import RankRuntime
from tag.deploy.schedule import Schedule
from tag.graph.opgraph import OpGraph


@dataclass
class RankResult:
    losses: list[float]  # global loss per step (before that step's update)
    step_ms: list[float]  # per step: the slowest rank's wall time, ms
    params: dict[str, torch.Tensor] = field(default_factory=dict)  # parameters this rank uses, after training

    def measured_step_ms(self, warmup: int = 1) -> float:
        """Median step time after `warmup` steps (all steps if there are no more), ms."""
        rest = self.step_ms[warmup:] or self.step_ms
        return float(statistics.median(rest)) if rest else float("nan")


def train_rank(schedule: Schedule, graph: OpGraph, program, rank: int, steps: int, seed: int, optimizer: str,
               lr: float, device: torch.device | str = "cpu", on_progress=None) -> RankResult:
    """Run `steps` training steps of `schedule` as rank `rank` (torch.distributed initialised if >1 rank).

    `on_progress(step, done)` is called as every step starts and after it ends (heartbeat, fault injection).
    """
    import torch.distributed as dist

    comm = Comm(rank, schedule.n_ranks, schedule.rank_machine,
                Comm.needed_sets(schedule.buckets, schedule.sfb, schedule.rank_machine), device)
    data, targets = synthetic_batch(graph, schedule.batch_size, seed)
    data = {k: v.to(device) for k, v in data.items()}
    targets = {k: v.to(device) for k, v in targets.items()}
    rt = RankRuntime(schedule, graph, program, rank, comm, data, targets, make_optimizer(optimizer, lr))
    losses, times = [], []
    for step in range(steps):
        if on_progress is not None:
            on_progress(step, False)
        if schedule.n_ranks > 1:
            dist.barrier()
        t0 = time.perf_counter()
        local = rt.step()
        if schedule.n_ranks > 1:
            dist.barrier()
        dt_ms = (time.perf_counter() - t0) * 1e3
        losses.append(comm.sum_scalar(local))
        times.append(comm.sum_scalar(dt_ms, op="max"))
        if on_progress is not None:
            on_progress(step, True)
    params = {n: program.param(n).detach().clone() for n in rt.my_params}
    return RankResult(losses, times, params)
