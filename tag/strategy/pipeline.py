"""Pipelines: stages of op groups run on micro-batches in a schedule (plan.json version 2 ``stages``).

A `Pipeline` cuts the groups into ordered stages (each group in exactly one stage; every edge between groups goes
from a stage to itself or a later one) and gives each stage its own devices. The global batch B of the plan is run
as m = ``micro_batches`` micro-batches: micro-batch j is the global rows [j*B/m, (j+1)*B/m). A group's row map in
the plan (``decisions[g].rows``) is over the whole batch; within every micro-batch device d computes rows[d] / m
of it, so every row count of a pipelined plan is a multiple of m (`micro_rows`). Within a micro-batch, rows are
contiguous in topology order exactly as in a plan without stages, so `tag.strategy.slices` on the micro row maps
says what crosses a stage boundary, the same for every micro-batch.

Each stage device runs its stage's forward (F) and backward (B) of every micro-batch in the order `stage_order`
gives; a group's gradients are summed over micro-batches (weighted by rows, as one device on the whole batch) and
synced once, after the stage's last backward.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b", "kfkb")


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its groups (ascending ids) and its devices (topology indices, ascending)."""

    groups: tuple[int, ...]
    devices: tuple[int, ...]


@dataclass(frozen=True)
class Pipeline:
    """Stages in pipeline order, the micro-batch count m and the schedule.

    schedule: ``gpipe`` (all forwards, then all backwards), ``1f1b`` (PipeDream-flush: after a warm-up of
    S - s - 1 forwards, stage s alternates one forward and one backward) or ``kfkb`` (Ada-Grouper: 1F1B over units
    of k micro-batches; k divides m). ``1f1b`` is ``kfkb`` with k = 1.
    """

    stages: tuple[Stage, ...]
    micro_batches: int
    schedule: str = "1f1b"
    k: int = 1

    def stage_of_group(self) -> dict[int, int]:
        """group id -> index of its stage."""
        return {g: s for s, st in enumerate(self.stages) for g in st.groups}

    def stage_of_device(self) -> dict[int, int]:
        """device index -> index of its stage."""
        return {d: s for s, st in enumerate(self.stages) for d in st.devices}

    @property
    def unit(self) -> int:
        """Micro-batches per schedule unit: k for kfkb, 1 for 1f1b; gpipe runs all m as one unit."""
        if self.schedule == "kfkb":
            return self.k
        return self.micro_batches if self.schedule == "gpipe" else 1


def micro_rows(rows: tuple[int, ...], micro_batches: int) -> tuple[int, ...]:
    """Each device's rows within one micro-batch: rows[d] / m (every count must be a multiple of m).

    >>> micro_rows((96, 32, 0), 8)
    (12, 4, 0)
    """
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    if any(r % micro_batches for r in rows):
        raise ValueError(f"row map {rows} is not a multiple of {micro_batches} micro-batches")
    return tuple(r // micro_batches for r in rows)


def stage_order(schedule: str, k: int, n_stages: int, stage: int, micro_batches: int) -> list[tuple[str, int]]:
    """The order stage `stage` of `n_stages` runs its passes: a list of ("F" | "B", micro-batch index).

    kfkb with units of k micro-batches (u = m / k units): w = min(S - s - 1, u) warm-up units of forwards, then
    u - w rounds of (forward of unit w + i, backward of unit i), then the remaining backwards. Each unit's passes run
    in micro-batch order. At most k * min(S - s, u) micro-batches are in flight (forward done, backward not yet).
    gpipe is all forwards then all backwards (micro-batch order); 1f1b is kfkb with k = 1.

    >>> stage_order("1f1b", 1, 2, 0, 4)
    [('F', 0), ('F', 1), ('B', 0), ('F', 2), ('B', 1), ('F', 3), ('B', 2), ('B', 3)]
    >>> stage_order("kfkb", 2, 2, 1, 4)
    [('F', 0), ('F', 1), ('B', 0), ('B', 1), ('F', 2), ('F', 3), ('B', 2), ('B', 3)]
    """
    m = micro_batches
    if m < 1:
        raise ValueError(f"micro_batches must be >= 1, got {m}")
    if not 0 <= stage < n_stages:
        raise ValueError(f"stage {stage} is not one of the {n_stages} stages")
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    if schedule == "1f1b":
        k = 1
    elif schedule != "kfkb":
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if k < 1 or m % k:
        raise ValueError(f"k = {k} does not divide {m} micro-batches")
    units = m // k
    warm = min(n_stages - stage - 1, units)

    def unit(kind: str, u: int) -> list[tuple[str, int]]:
        return [(kind, j) for j in range(u * k, (u + 1) * k)]

    out: list[tuple[str, int]] = []
    for u in range(warm):
        out += unit("F", u)
    for i in range(units - warm):
        out += unit("F", warm + i) + unit("B", i)
    for u in range(units - warm, units):
        out += unit("B", u)
    return out


def max_in_flight(order: list[tuple[str, int]]) -> int:
    """The most micro-batches whose forward has run and whose backward has not, over a stage's order.

    >>> max_in_flight(stage_order("gpipe", 1, 2, 0, 4))
    4
    """
    live = peak = 0
    for kind, _ in order:
        live += 1 if kind == "F" else -1
        peak = max(peak, live)
    return peak
