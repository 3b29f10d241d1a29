"""Train a plan for some steps on this rank: the loop the worker and the tests share.

`train_rank` builds the rank's runtime and runs steps [start_step, steps). Without a `DataSource` every step
trains on one synthetic global batch (`tag.deploy.data`, MSE). With one, step s loads the rows
[lo, hi) of global batch s (`tag.deploy.sampler`) that this rank's groups compute, and the loss is the
`DataSource`'s. It returns the global loss of every step (summed over ranks), the step wall time (max over
ranks, each step fenced by barriers) and, with user data, per-epoch records.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field

import torch

from tag.deploy.comm import Comm
from tag.deploy.data import make_optimizer, synthetic_batch
from tag.deploy.loss import MSE, Loss
from tag.deploy.runtime import RankRuntime
from tag.deploy.sampler import EpochOrder, RankBatchSampler, rank_span
from tag.deploy.schedule import Schedule
from tag.graph.opgraph import OpGraph


@dataclass(frozen=True)
class DataSource:
    """User data of a run: the `--data` spec, what its rows look like, and the epoch order of its batches."""

    spec: str
    shapes: object  # tag.deploy.dataset.DataShapes
    order: EpochOrder
    dataset: object = None  # a dataset object (the Python API); None: call the `spec` factory on each rank


@dataclass
class RankResult:
    losses: list[float]  # global loss per step (before that step's update)
    step_ms: list[float]  # per step: the slowest rank's wall time, ms
    params: dict[str, torch.Tensor] = field(default_factory=dict)  # parameters this rank uses, after training
    epochs: list[dict] = field(default_factory=list)  # per epoch touched: epoch, steps, loss, accuracy, samples_per_s
    correct: list[float] = field(default_factory=list)  # per step: rows classified right, over all ranks (Loss.correct)
    optimizer_state: dict = field(default_factory=dict)  # per parameter this rank uses (checkpoint.optimizer_state_by_name)

    def measured_step_ms(self, warmup: int = 1) -> float:
        """Median step time after `warmup` steps (all steps if there are no more), ms."""
        rest = self.step_ms[warmup:] or self.step_ms
        return float(statistics.median(rest)) if rest else float("nan")


def data_span(schedule: Schedule, rank: int, output: str) -> tuple[int, int]:
    """Global rows [lo, hi) this rank reads: the rows of its groups that read data inputs or make `output`.

    Pipelined: the rows of such a group in micro-batch j are j b + [off, off + n) (b rows per micro-batch), so the
    span runs from the first micro-batch's first to the last micro-batch's last."""
    parts = [(schedule.rank_offset(g, rank), schedule.rank_rows[g][rank])
             for g, io in enumerate(schedule.groups) if io.data_inputs or output in io.outputs]
    pipe = schedule.pipeline
    if pipe is not None:
        last = (pipe.micro_batches - 1) * pipe.micro_batch_rows
        parts += [(off + last, n) for off, n in parts]
    return rank_span(parts)


def train_rank(schedule: Schedule, graph: OpGraph, program, rank: int, steps: int, seed: int, optimizer: str,
               lr: float, device: torch.device | str = "cpu", on_progress=None, *, loss: Loss = MSE,
               data: DataSource | None = None, start_step: int = 0, resume: dict | None = None,
               on_epoch_end=None, step_probe=None, precision: str = "fp32") -> RankResult:
    """Run training steps [start_step, steps) of `schedule` as rank `rank` (torch.distributed initialised if >1 rank).

    `on_progress(i, done)` is called as the i-th step of this run starts and after it ends (heartbeat, fault
    injection). `resume`: a checkpoint state (`tag.deploy.checkpoint.load_state`) applied before the first step.
    `on_epoch_end(runtime, step_done)`: called on every rank after the last step of an epoch and after the
    run's last step (checkpoints). `step_probe(runtime, step)`: a context manager entered around each step's
    forward, backward and update (`tag.deploy.memory_probe.StepProbe` measures peak live tensor bytes).
    `precision`: the plan's training.precision (`tag.deploy.precision`).
    """
    import torch.distributed as dist

    from tag.deploy.precision import Precision

    group_sets = [schedule.ranks_of(g) for g in range(len(schedule.groups))]  # batch statistics of replicated groups
    group_sets += [u.ranks for u in schedule.zero_units]  # a sharded group's units span a position's peers
    group_sets += [sg.peers(j) for sg in schedule.shards.values() for j in range(sg.k)]  # and its batch statistics
    comm = Comm(rank, schedule.n_ranks, schedule.rank_machine,
                Comm.needed_sets(schedule.buckets, schedule.sfb, schedule.rank_machine) + group_sets, device,
                [rep for sg in schedule.shards.values() for rep in sg.replicas])
    sampler = ds = ignored = None
    if data is None:
        batch, targets = synthetic_batch(graph, schedule.batch_size, seed)
        batch = {k: v.to(device) for k, v in batch.items()}
        targets = {k: v.to(device) for k, v in targets.items()}
    else:
        from tag.deploy.dataset import make_dataset

        ds = make_dataset(data.spec) if data.dataset is None else data.dataset
        ignored = _ignored_labels(ds, loss)
        lo, hi = data_span(schedule, rank, data.shapes.output)
        sampler = RankBatchSampler(data.order, lo, hi, stop_step=steps, start_step=start_step)
        batch, targets = {}, {}
    runtime = RankRuntime
    if schedule.pipeline is not None:
        from tag.deploy.pipeline_runtime import PipelineRankRuntime as runtime
    rt = runtime(schedule, graph, program, rank, comm, batch, targets, make_optimizer(optimizer, lr), loss,
                 Precision(precision, torch.device(device).type))
    rt.seed = seed
    if resume is not None:
        rt.load_state(resume["weights"], resume["optimizer"])
    losses, times, correct, epochs = [], [], [], []
    epoch_acc = _EpochAccumulator()
    for i, step in enumerate(range(start_step, steps)):
        if on_progress is not None:
            on_progress(i, False)
        rt.step_index = step
        if sampler is not None:
            _load_step(rt, ds, sampler, step, data, device)
            rt.counted = None if ignored is None else ignored.counted(data.order.batch(step))
        if schedule.n_ranks > 1:
            dist.barrier()
        t0 = time.perf_counter()
        with step_probe(rt, step) if step_probe is not None else contextlib.nullcontext():
            local = rt.step()
        if schedule.n_ranks > 1:
            dist.barrier()
        dt_ms = (time.perf_counter() - t0) * 1e3
        losses.append(comm.sum_scalar(local))
        times.append(comm.sum_scalar(dt_ms, op="max"))
        if data is not None:
            correct.append(comm.sum_scalar(float(rt.correct)) if loss.classifies else 0.0)
            epoch_acc.add(losses[-1], correct[-1], schedule.batch_size)
            if (step + 1) % data.order.steps_per_epoch == 0 or step + 1 == steps:
                epochs.append(epoch_acc.record(data.order.epoch_of(step), loss.classifies))
                epoch_acc = _EpochAccumulator()
        epoch_end = data is not None and (step + 1) % data.order.steps_per_epoch == 0
        if on_epoch_end is not None and (epoch_end or step + 1 == steps):
            on_epoch_end(rt, step + 1)
        if on_progress is not None:
            on_progress(i, True)
    return RankResult(losses, times, rt.trained_weights(), epochs, correct, rt.optimizer_state())


def _ignored_labels(ds, loss: Loss):
    """`tag.deploy.loss.IgnoredLabels` of the dataset's labels for a class-label loss that has ignored ones, else
    None (every rank counts them the same way, so no message carries a step's count)."""
    from tag.deploy.dataset import label_rows
    from tag.deploy.loss import CLASS_LABEL_LOSSES, count_labels

    if loss.fn is not None or loss.name not in CLASS_LABEL_LOSSES:
        return None
    return count_labels(label_rows(ds))


def _load_step(rt: RankRuntime, ds, sampler: RankBatchSampler, step: int, data: DataSource, device) -> None:
    """Put this rank's rows of global batch `step` into the runtime (inputs and the prediction's target)."""
    from tag.deploy.dataset import load_rows

    inputs, target = load_rows(ds, sampler.rows(step), data.shapes, data.spec, device)
    rt.data, rt.targets, rt.row_base = inputs, {data.shapes.output: target}, sampler.lo


class _EpochAccumulator:
    """Sums over the steps of one epoch: loss, rows classified right, rows, wall time."""

    def __init__(self):
        self.loss_sum, self.correct, self.rows, self.steps, self.t0 = 0.0, 0, 0, 0, time.perf_counter()

    def add(self, loss: float, correct: float, rows: int) -> None:
        self.loss_sum, self.correct, self.rows, self.steps = (self.loss_sum + loss, self.correct + correct,
                                                              self.rows + rows, self.steps + 1)

    def record(self, epoch: int, classifies: bool) -> dict:
        """{epoch, steps, loss (mean step loss), accuracy (training rows right / rows, or None), samples_per_s}."""
        secs = time.perf_counter() - self.t0
        return {"epoch": epoch, "steps": self.steps, "loss": self.loss_sum / max(self.steps, 1),
                "accuracy": self.correct / self.rows if classifies and self.rows else None,
                "samples_per_s": self.rows / secs if secs > 0 else None}
