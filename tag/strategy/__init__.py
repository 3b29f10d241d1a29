"""The Strategy: per op group, who computes which batch rows and how gradients are synchronised.

A `Decision` gives a group a row map ``rows[d]`` = rows device d computes (devices in topology order;
the counts sum to the global batch). Rows are contiguous slices in topology order, so device d holds
global rows ``[offsets[d], offsets[d] + rows[d])``. `slices` is the one function that says which rows
move when a consumer's row map differs from its producer's; the simulator and deploy both use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SYNC_METHODS = ("allreduce", "hierarchical", "ps")


@dataclass(frozen=True)
class Decision:
    rows: tuple[int, ...]  # per device, topology order
    sync: str | None = None  # None | "allreduce" | "hierarchical" | "ps"
    server: int | None = None  # device index for "ps"
    sfb: tuple[str, ...] = ()  # op names whose weight gradients go as sufficient factors

    @property
    def devices(self) -> tuple[int, ...]:
        """Indices of the devices with at least one row."""
        return tuple(d for d, r in enumerate(self.rows) if r > 0)

    @property
    def replicated(self) -> bool:
        return len(self.devices) > 1


@dataclass(frozen=True)
class Strategy:
    decisions: tuple[Decision, ...]  # one per group, indexed by group id

    def replace(self, group: int, decision: Decision) -> "Strategy":
        ds = list(self.decisions)
        ds[group] = decision
        return Strategy(tuple(ds))


def row_offsets(rows: tuple[int, ...]) -> list[int]:
    """Start row of each device's contiguous slice (prefix sums in topology order).

    >>> row_offsets((2, 0, 3))
    [0, 2, 2]
    """
    out, acc = [], 0
    for r in rows:
        out.append(acc)
        acc += r
    return out


@dataclass(frozen=True)
class Slice:
    """Rows [start, start + rows) of the global batch sent from device src to device dst."""

    src: int
    dst: int
    start: int
    rows: int


def slices(producer_rows: tuple[int, ...], consumer_rows: tuple[int, ...]) -> list[Slice]:
    """The row slices that must move from producer devices to consumer devices.

    Each consumer device needs its contiguous range of rows; the part of that range a producer device
    holds is sent from it, unless producer and consumer are the same device. Both row maps must sum to
    the same batch. Result is ordered by (dst, start).

    >>> slices((4, 4), (2, 6))
    [Slice(src=0, dst=1, start=2, rows=2)]
    >>> slices((8, 0), (8, 0))
    []
    """
    if sum(producer_rows) != sum(consumer_rows):
        raise ValueError(f"row maps sum to different batches: {sum(producer_rows)} vs {sum(consumer_rows)}")
    p_off = row_offsets(producer_rows)
    c_off = row_offsets(consumer_rows)
    out: list[Slice] = []
    for dst, (c_start, c_n) in enumerate(zip(c_off, consumer_rows)):
        if c_n == 0:
            continue
        c_end = c_start + c_n
        for src, (p_start, p_n) in enumerate(zip(p_off, producer_rows)):
            if p_n == 0 or src == dst:
                continue
            lo, hi = max(c_start, p_start), min(c_end, p_start + p_n)
            if hi > lo:
                out.append(Slice(src, dst, lo, hi - lo))
    return out


OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class TrainingConfig:
    """Training settings a plan carries (DESIGN.md § Training semantics).

    precision: "fp32" is what the planner and deploy support now; "tf32" and "amp" pick the catalog's
    other peaks once supported.
    """

    optimizer: str = "adam"
    lr: float = 1e-3
    loss: str = "mse"
    precision: str = "fp32"

    def to_json(self) -> dict:
        return {"optimizer": self.optimizer, "lr": self.lr, "loss": self.loss, "precision": self.precision}
