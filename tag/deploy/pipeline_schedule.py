"""The rank-level plan of a pipelined strategy: which stage each rank runs, in which order, and the message tags.

Pure functions over plain data (no torch); every rank computes the same plan from the same strategy.

A pipelined strategy (`tag.strategy.pipeline.Pipeline`) runs the global batch of B rows as m micro-batches of
B / m rows; micro-batch j is the global rows [j B/m, (j+1) B/m). Within a micro-batch every group runs its micro row
map (`micro_rows`: device d runs rows[d] / m rows, contiguous in topology order), so the deploy `Schedule` of a
pipelined plan is the ordinary schedule of the micro row maps (its transfers are `tag.strategy.slices` of those, the
same for every micro-batch), with ``batch_size`` the global B (each micro-batch's loss term is its rows' share of
the global mean, so the terms of all micro-batches and ranks add up to the full-batch loss) and a `PipelinePlan`:

- ``rank_stage[r]``: the stage rank r's devices belong to (None for a rank whose devices are in no stage). With
  fewer ranks than devices (`device_ranks`), all devices of a rank must lie in one stage (devices in no stage may
  join any); the rank then runs that stage for the devices it hosts, their rows concatenated.
- ``orders[r]``: rank r's passes, `tag.strategy.pipeline.stage_order` of its stage: ("F", j) runs the forwards of
  the rank's groups of that stage on micro-batch j (ascending group ids), ("B", j) their backwards (descending).
- message tags: micro-batch j's transfer k into consumer group c travels forward with tag
  ``tag(j, False, c, k)`` and its gradient back with ``tag(j, True, c, k)``, all distinct, so the runtime can post
  a send as soon as the producer has computed it and a receive when the consumer needs it, in any interleaving.

A tensor crosses to a rank once (issue 21, as `tag.sim.tensor_sends` models it), pipelined or not: transfer k into
group c equal to a transfer k0 into a lower group c0 (same tensor, producer, ranks, rows and gradient flag; the
schedule lists one per consuming group) is an alias of (c0, k0), the lowest such (`transfer_aliases`); it sends no
message, c reads c0's received slice, and its gradient is added into c0's, which goes back once (`tag.deploy.runtime`).
Transfers of a tensor with a sharded end (`Schedule.sources`) are never aliases.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tag.deploy.ranks import device_ranks
from tag.errors import InputError
from tag.strategy import Strategy
from tag.strategy.pipeline import Pipeline, micro_rows, stage_order

TAG_LIMIT = 7_000_000  # tags at and above belong to `tag.deploy.p2p_collectives` (gradient sums)


@dataclass(frozen=True)
class PipelinePlan:
    """The rank-level pipeline of a schedule (see the module docstring).

    micro_batches: m; micro_batch_rows: B / m; stage_groups[s]: the group ids of stage s, ascending;
    rank_stage[r]: stage of rank r or None; orders[r]: rank r's (kind, micro-batch) passes; transfer_base[c]: the
    number of transfers into groups before c (tags number every transfer of a micro-batch once); n_transfers: their
    total; sends_of[p]: (consumer group c, index k in ``transfers[c]``) of every transfer group p's outputs feed.
    """

    micro_batches: int
    micro_batch_rows: int
    schedule: str
    k: int
    stage_groups: tuple[tuple[int, ...], ...]
    rank_stage: tuple[int | None, ...]
    orders: tuple[tuple[tuple[str, int], ...], ...]
    transfer_base: tuple[int, ...]
    n_transfers: int
    sends_of: tuple[tuple[tuple[int, int], ...], ...]

    def tag(self, micro_batch: int, backward: bool, consumer: int, k: int) -> int:
        """Message tag of transfer k into group `consumer` on `micro_batch` (forward activation or its gradient).

        >>> plan = PipelinePlan(4, 2, "1f1b", 1, ((0,), (1,)), (0, 1), (), (0, 0), 1, ((), ()))
        >>> [plan.tag(j, b, 1, 0) for j in range(2) for b in (False, True)]
        [0, 1, 2, 3]
        """
        return (2 * micro_batch + int(backward)) * self.n_transfers + self.transfer_base[consumer] + k

    def rank_groups(self, rank: int) -> tuple[int, ...]:
        """The groups of rank `rank`'s stage (ascending), () for a rank in no stage."""
        s = self.rank_stage[rank]
        return () if s is None else self.stage_groups[s]


def micro_strategy(strategy: Strategy, plan_file: str = "plan.json") -> Strategy:
    """The strategy of one micro-batch: every decision's rows divided by m, no pipeline (buckets kept).

    InputError when a row count is not a multiple of m or below it (every replica runs at least one row).
    """
    pipe = strategy.pipeline
    m = pipe.micro_batches
    decisions = []
    for g, dec in enumerate(strategy.decisions):
        for d, r in enumerate(dec.rows):
            if r and (r % m or r < m):
                raise InputError(plan_file, f"decisions[{g}].rows", f"row counts that are multiples of "
                                 f"micro_batches {m} (each micro-batch runs rows / {m} on a device)", str(r))
        decisions.append(dataclasses.replace(dec, rows=micro_rows(dec.rows, m)))
    return Strategy(tuple(decisions), strategy.bucket_mb, strategy.buckets, None)


def rank_stages(pipe: Pipeline, dev_rank: list[int], nproc: int, decisions, plan_file: str = "plan.json"
                ) -> tuple[int | None, ...]:
    """The stage of each rank: the one stage of its devices (None if none of them is in a stage).

    InputError when a group has rows on a device outside its stage, or a rank's devices lie in two stages (then the
    message lists the rank counts that would work).

    >>> from tag.strategy.pipeline import Stage
    >>> pipe = Pipeline((Stage((0,), (0, 1)), Stage((1,), (2, 3))), 2)
    >>> rank_stages(pipe, [0, 0, 1, 1], 2, [])
    (0, 1)
    """
    stage_of_dev = pipe.stage_of_device()
    stage_of_group = pipe.stage_of_group()
    for g, dec in enumerate(decisions):
        s = stage_of_group.get(g)
        if s is None:
            raise InputError(plan_file, "stages", "every group in exactly one stage", f"group {g} in no stage")
        for d in dec.devices:
            if stage_of_dev.get(d) != s:
                raise InputError(plan_file, f"decisions[{g}].rows", f"rows only on the devices of stages[{s}]",
                                 f"{dec.rows[d]} rows on device {d}")
    out, clash = _stages_of_ranks(stage_of_dev, dev_rank, nproc)
    if clash is None:
        return out
    r, a, b = clash
    n_dev = len(dev_rank)
    ok = [n for n in range(1, n_dev + 1) if _stages_of_ranks(stage_of_dev, device_ranks(n_dev, n), n)[1] is None]
    raise InputError("--nproc", str(nproc), "a rank count whose ranks each host devices of one pipeline stage "
                     f"(here: {', '.join(map(str, ok))})",
                     f"rank {r} would host devices of stages[{a}] and stages[{b}]")


def _stages_of_ranks(stage_of_dev: dict[int, int], dev_rank: list[int], nproc: int):
    """(per rank its stage or None, None), or (None, (rank, stage a, stage b)) for the first rank whose devices
    span two stages."""
    out: list[int | None] = [None] * nproc
    for d, r in enumerate(dev_rank):
        s = stage_of_dev.get(d)
        if s is None:
            continue
        if out[r] is not None and out[r] != s:
            return None, (r, out[r], s)
        out[r] = s
    return tuple(out), None


def transfer_aliases(transfers, sharded=frozenset()) -> tuple:
    """Per consumer group c and transfer k, the (c0, k0) of the first equal transfer into a lower group, or None
    (module docstring); transfers of a (consumer group, tensor) in `sharded` (`Schedule.sources`: a sharded end)
    neither alias nor are aliased.

    >>> from tag.deploy.schedule import Transfer
    >>> h = Transfer("h", 0, 0, 1, 0, 2)
    >>> transfer_aliases([[], [h], [Transfer("y", 1, 1, 1, 0, 2), h]])
    ((), (None,), (None, (1, 0)))
    """
    first: dict = {}
    out = []
    for c, lst in enumerate(transfers):
        row = []
        for k, tr in enumerate(lst):
            hit = None if (c, tr.tensor) in sharded else first.setdefault(tr, (c, k))
            row.append(None if hit is None or hit == (c, k) else hit)
        out.append(tuple(row))
    return tuple(out)


def pipeline_plan(pipe: Pipeline, transfers, rank_stage: tuple[int | None, ...], batch_size: int) -> PipelinePlan:
    """The `PipelinePlan` of `pipe` given the micro-batch schedule's transfers (per consumer group, in order)."""
    m, n_stages = pipe.micro_batches, len(pipe.stages)
    orders = tuple(() if s is None else tuple(stage_order(pipe.schedule, pipe.k, n_stages, s, m))
                   for s in rank_stage)
    base, acc = [], 0
    for lst in transfers:
        base.append(acc)
        acc += len(lst)
    sends: list[list[tuple[int, int]]] = [[] for _ in transfers]
    for c, lst in enumerate(transfers):
        for k, tr in enumerate(lst):
            sends[tr.producer_group].append((c, k))
    plan = PipelinePlan(m, batch_size // m, pipe.schedule, pipe.k, tuple(st.groups for st in pipe.stages),
                        rank_stage, orders, tuple(base), acc, tuple(tuple(x) for x in sends))
    if acc and plan.tag(m - 1, True, len(transfers) - 1, len(transfers[-1]) - 1) >= TAG_LIMIT:
        raise ValueError(f"{m} micro-batches x {acc} transfers need more message tags than {TAG_LIMIT}")
    return plan


def pipeline_parts(strategy: Strategy, n_devices: int, nproc: int, plan_file: str = "plan.json"):
    """The checks of a pipelined strategy on `nproc` ranks and what its deploy `Schedule` is built from: (the strategy
    of one micro-batch, each rank's stage). `tag.deploy.schedule.build_schedule` builds the micro-batch schedule
    and `with_pipeline` adds the global batch and the stage plan.

    InputError for SFB entries (deploy runs sufficient factors without micro-batches only), rows that do not divide
    into the micro-batches, rows off their stage's devices, or ranks spanning two stages.
    """
    for g, dec in enumerate(strategy.decisions):
        if dec.sfb:
            raise InputError(plan_file, f"decisions[{g}].sfb", "no SFB ops in a pipelined plan (deploy sends "
                             "sufficient factors only without micro-batches)", repr(list(dec.sfb)))
    rank_stage = rank_stages(strategy.pipeline, device_ranks(n_devices, nproc), nproc, strategy.decisions, plan_file)
    return micro_strategy(strategy, plan_file), rank_stage


def with_pipeline(micro, strategy: Strategy, rank_stage):
    """The deploy `Schedule` of a pipelined strategy: its micro-batch schedule `micro` with the global batch and the
    stage plan."""
    batch = sum(strategy.decisions[0].batch_rows) if strategy.decisions else 0  # a shard's replicas once
    return dataclasses.replace(micro, batch_size=batch,
                               pipeline=pipeline_plan(strategy.pipeline, micro.transfers, rank_stage, batch))
