"""A plan loaded inside one torch.distributed rank: the rank's schedule, its rows, its collectives.

`load_plan` reads and checks the plan against its model and topology exactly as `tag deploy` does
(`tag.deploy.job.prepare_job`), maps the plan's devices onto the ``world`` ranks (contiguous blocks of topology
order) and joins the process group if the caller has not (gloo on CPU, NCCL when every plan device is a GPU and
CUDA is present; rank and world from torchrun's environment).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tag.errors import InputError


@dataclass
class RankPlan:
    """One rank's view of a plan. `job`: the checked plan, model and topology (`tag.deploy.job.Job`);
    `schedule`: the rank-level schedule (`tag.deploy.schedule.Schedule`); `comm`: its collectives."""

    job: object
    schedule: object
    rank: int
    world: int
    device: object  # torch.device
    comm: object = None  # tag.deploy.comm.Comm, created on first use (every rank must create it)

    @property
    def batch_rows(self) -> int:
        """The plan's global batch B."""
        return self.schedule.batch_size

    def collectives(self):
        """The rank's `Comm` with every sub-group the schedule needs (a collective call: all ranks make it)."""
        if self.comm is None:
            from tag.deploy.comm import Comm

            s = self.schedule
            self.comm = Comm(self.rank, s.n_ranks, s.rank_machine, Comm.needed_sets(s.buckets, s.sfb, s.rank_machine),
                             self.device)
        return self.comm

    def data_parallel_rows(self) -> tuple[int, int]:
        """(offset, rows) of this rank in every group, for plans whose groups all share one row map.

        InputError naming the plan when the groups' row maps differ (placement or hybrid plans run on the ONNX
        model through `train_onnx`, not on a user module)."""
        s = self.schedule
        if s.pipeline is not None:  # rank_rows are then one micro-batch's
            raise InputError(self.job.plan_path, "stages", "a plan without stages to train an nn.Module (pipelined "
                             "plans run on the ONNX model through `train_onnx`)",
                             f"{len(s.pipeline.stage_groups)} stages")
        if s.shards:  # a sharded group splits weights, not rows: the module's layers would not be cut
            g = min(s.shards)
            raise InputError(self.job.plan_path, f"decisions[{g}].shard", "a plan without shards to train an "
                             "nn.Module (sharded plans run on the ONNX model through `train_onnx`)",
                             s.shards[g].layout.split)
        first = s.rank_rows[0]
        for g, rows in enumerate(s.rank_rows):
            if rows != first:
                raise InputError(self.job.plan_path, f"decisions[{g}].rows",
                                 "one row map for every group (a data-parallel plan) to train an nn.Module",
                                 f"{list(rows)} on the ranks where group 0 has {list(first)}")
        return s.rank_offset(0, self.rank), first[self.rank]

    def sampler(self, n_rows: int, seed: int = 0, steps: int | None = None, epochs: int | None = None,
                start_step: int = 0):
        """A `RankBatchSampler` over a dataset of `n_rows`: this rank's rows of every global batch.

        steps is the total step count (or `epochs` passes; default one epoch)."""
        from tag.deploy.sampler import EpochOrder, RankBatchSampler
        from tag.deploy.train import data_span

        order = EpochOrder(n_rows, self.batch_rows, seed)
        if order.steps_per_epoch < 1:
            raise InputError("dataset", "len(dataset)", f"at least the plan's global batch of {self.batch_rows} rows",
                             str(n_rows))
        if steps is not None and epochs is not None:
            raise InputError("sampler", "steps", "either steps or epochs", f"steps={steps}, epochs={epochs}")
        total = steps if steps is not None else (epochs or 1) * order.steps_per_epoch
        lo, hi = data_span(self.schedule, self.rank, self.job.graph.outputs[0])
        return RankBatchSampler(order, lo, hi, stop_step=total, start_step=start_step)


def load_plan(plan_path: str, model_path: str, topology_path: str | None = None, *, batch_size: int | None = None,
              backend: str | None = None) -> RankPlan:
    """The plan for this rank (see the module docstring); InputError on a plan that does not fit model or topology.
    Like `tag deploy`'s ranks, the process keeps its freed CPU memory from here on (`tag.memory.keep_freed_memory`)."""
    import torch
    import torch.distributed as dist

    from tag.deploy.job import DeployOptions, prepare_job
    from tag.deploy.schedule import build_schedule
    from tag.memory import keep_freed_memory
    from tag.modelio import ModelOptions

    keep_freed_memory()

    world = dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    job = prepare_job(plan_path, model_path, DeployOptions(topology_path=topology_path, nproc=world,
                                                           model=ModelOptions(batch_size=batch_size)))
    use_cuda = torch.cuda.is_available() and all(k == "gpu" for k in job.device_kinds)
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}") if use_cuda else torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if use_cuda else "gloo"), rank=rank, world_size=world)
    sched = build_schedule(job.graph, job.groups, job.strategy, job.device_machines, world, job.plan_path)
    return RankPlan(job, sched, rank, world, device)
