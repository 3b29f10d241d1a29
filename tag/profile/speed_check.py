"""The machine's speed now against when a profile was taken: `tag deploy` re-times the profile's reference step.

A shared machine's speed drifts between minutes, in thread CPU time too (other tenants, the host's placement of the
VM's cores), and `tag profile ops` samples it once. Its ``step`` block holds the deploy runtime's single-rank step
of the model, group by group, at each measured row count. Right before the ranks start, `tag deploy` builds the same
step (the step block's groups, optimizer and seed; `tag.profile.step._single_rank_runtime`) at the row count r the
contention probe used (`contention.rows`, or the step block's largest) and times it the same way (thread CPU,
median of `repeats` steps after `warmup`). With

    then_ms = sum over groups of (fwd_ms[r] + bwd_ms[r]) + update_ms[r] + other_ms[r]      (the step block)
    now_ms  = the median step now

the factor ``speed = sqrt(now_ms / then_ms)`` (`tag.cost.contention.shrunk_ratio`: each side is one median of a
few steps on a machine that drifts by as much between minutes, so half of the log ratio is taken as signal, as for
the rank speed) multiplies every compute time of deploy's prediction (`tag.cli.deploy.predict_as_run`,
`tag.cost.base` `scaled`): 0.9 means the machine computes the step in about 10 % less CPU time than when profiled.
The measured runs that chose this form are in benchmarks/fidelity.md (the user flow and runs S and T).

None (no check) when the profile has no step block or was timed on the wall clock, or when no grouping of the model
matches the step block's op names (the profile belongs to another export of the model).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

WARMUP, REPEATS = 6, 5  # six warm-up steps: a fresh process pays first-touch page faults that the profile, timed after its op sweep, no longer did


@dataclass(frozen=True)
class SpeedCheck:
    """rows: the row count timed; then_ms / now_ms: the step's thread CPU ms in the profile and now; factor =
    sqrt(now_ms / then_ms) (module docstring)."""

    rows: int
    then_ms: float
    now_ms: float

    @property
    def factor(self) -> float:
        from tag.cost.contention import shrunk_ratio

        return shrunk_ratio(self.now_ms, self.then_ms)

    def to_json(self) -> dict:
        return {"rows": self.rows, "profile_ms": self.then_ms, "now_ms": self.now_ms, "factor": self.factor}


def reference_rows(step, contention_rows: int | None) -> int | None:
    """The row count to time: the contention probe's when the step block holds it, else the block's largest."""
    if contention_rows in step.rows:
        return int(contention_rows)
    return int(step.rows[-1]) if step.rows else None


def step_block_ms(step, rows: int) -> float:
    """then_ms of the module docstring: the step block's whole step at `rows` (which it must hold), ms.

    >>> from types import SimpleNamespace as N
    >>> st = N(rows=[8, 16], groups=[N(fwd_ms=[1.0, 2.0], bwd_ms=[2.0, 4.0]), N(fwd_ms=[0.5, 1.0], bwd_ms=[1.0, 2.0])],
    ...        update_ms=[3.0, 3.0], other_ms=[0.5, 0.5])
    >>> step_block_ms(st, 16)
    12.5
    """
    i = step.rows.index(rows)
    return sum(g.fwd_ms[i] + g.bwd_ms[i] for g in step.groups) + step.update_ms[i] + step.other_ms[i]


def time_step_ms(rt, warmup: int = WARMUP, repeats: int = REPEATS) -> float:
    """Median thread CPU ms of `rt.step()` over `repeats` steps after `warmup` untimed ones."""
    times = []
    for i in range(warmup + repeats):
        c0 = time.thread_time()
        rt.step()
        if i >= warmup:
            times.append((time.thread_time() - c0) * 1e3)
    return float(statistics.median(times))


def _profile_groups(model_path: str, rows: int, names: list[list[str]], batches: list[int]):
    """(graph at `rows` rows, op-id groups) whose op names are the step block's `names`: `tag profile ops` coarsened
    the graph at its --batch-size, which the profile does not record, so each of `batches` is tried (coarsening
    depends on the batch); None when none matches."""
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    graph = load_model(model_path, batch_size=rows, n_devices=1)
    for b in dict.fromkeys(batches):
        gg = coarsen(load_model(model_path, batch_size=b, n_devices=1) if b != rows else graph, k=len(names),
                     n_devices=1)
        got = [[graph.ops[i].name for i in g.op_ids if not graph.ops[i].is_weight_generator] for g in gg.groups]
        if [n for n in got if n] == names:
            return graph, [list(g.op_ids) for g in gg.groups]
    return None


def speed_check(model_path: str, profile_path: str, batch_size: int | None = None) -> SpeedCheck | None:
    """Time the profile's reference step now (module docstring); None when there is nothing to compare.
    `batch_size`: the batch the profile was most likely taken at (the plan's), tried first to rebuild its groups."""
    import onnx

    from tag.cost.profile_db import load

    db = load(profile_path)
    step = db.step
    if step is None or not step.groups or db.settings.get("clock", "thread") != "thread":
        return None
    rows = reference_rows(step, db.contention.rows if db.contention is not None else None)
    if rows is None:
        return None
    batches = ([batch_size] if batch_size else []) + [int(r) for r in reversed(step.rows)] + [2 * int(step.rows[-1])]
    found = _profile_groups(model_path, rows, [list(g.ops) for g in step.groups], batches)
    if found is None:
        return None
    graph, groups = found
    import torch

    from tag.profile.step import _single_rank_runtime

    torch.set_num_threads(max(1, int(db.threads or 1)))
    rt = _single_rank_runtime(onnx.load(model_path), graph, groups, rows,
                              int(db.settings.get("seed", 0)), step.optimizer or "adam", 1e-3)
    return SpeedCheck(rows, step_block_ms(step, rows), time_step_ms(rt))
