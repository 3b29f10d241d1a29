"""The Strategy: per op group, who computes which batch rows and how gradients are synchronised.

A `Decision` gives a group a row map ``rows[d]`` = rows device d computes (devices in topology order;
the counts sum to the global batch). Rows are contiguous slices in topology order, so device d holds
global rows ``[offsets[d], offsets[d] + rows[d])``. `slices` is the one function that says which rows
move when a consumer's row map differs from its producer's; the simulator and deploy both use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property, lru_cache
from operator import attrgetter

from tag.strategy.pipeline import Pipeline
from tag.strategy.shard import Shard, batch_rows

# Gradient sync algorithms (plan.json version 2; `tag.sim.collectives` says what each puts on the wire):
# ring all-reduce; NCCL's double binary tree; hierarchical = reduce-scatter inside each machine, all-reduce of each
# 1/k shard across machines, all-gather inside; leader = version 1's "hierarchical" (chain reduce to each machine's
# first replica, ring across those leaders, chain broadcast); ps = push to a server device, pull back.
SYNC_METHODS = ("ring", "tree", "hierarchical", "leader", "ps")
AUTO = "auto"  # Decision.sync: the bucket's algorithm is the cheapest of BY_COST (`tag.sim.algorithms`)
BY_COST = ("ring", "tree", "hierarchical")
V1_SYNC_NAMES = {"allreduce": "ring", "hierarchical": "leader", "ps": "ps"}  # plan.json version 1 -> version 2
DEFAULT_BUCKET_MB = 25.0  # PyTorch DDP's bucket_cap_mb default (torch.nn.parallel.DistributedDataParallel)


def _cached_hash(obj) -> int:
    """The hash a frozen dataclass generates, hash(tuple of its hashed fields), kept in the instance after the first
    call: the search looks the same strategies up in several caches, and hashing a strategy hashes every decision's
    row map. (A string's hash differs between processes, so the kept value is never pickled:
    `_state_without_hash`.)"""
    h = obj.__dict__.get("_hash")
    if h is None:
        h = obj.__dict__["_hash"] = hash(_hashed_fields(type(obj))(obj))
    return h


@lru_cache(maxsize=None)
def _hashed_fields(cls) -> attrgetter:
    """The fields the generated hash of dataclass `cls` covers (`hash`, else `compare`), as one getter."""
    return attrgetter(*[f.name for f in fields(cls) if (f.compare if f.hash is None else f.hash)])


def _state_without_hash(obj) -> dict:
    """The instance's state for pickle and copy, without the hash `_cached_hash` kept."""
    state = dict(obj.__dict__)
    state.pop("_hash", None)
    return state


@dataclass(frozen=True)
class Decision:
    rows: tuple[int, ...]  # per device, topology order
    sync: str | None = None  # None (= ring when replicated) | one of SYNC_METHODS | AUTO
    server: int | None = None  # device index for "ps"
    sfb: tuple[str, ...] = ()  # op names whose weight gradients go as sufficient factors
    # ZeRO stage over the group's replicas (`tag.strategy.memory_decisions`): 0 = every replica keeps all
    # weights, gradients and optimizer states; 1 shards optimizer states, 2 also gradients, 3 also weights
    zero: int = 0
    recompute: bool = False  # keep only the group's inputs in the forward and re-run it before its backward
    # weights split over the devices of each replica (`tag.strategy.shard`); None = every device holds them whole
    shard: Shard | None = None

    def __post_init__(self):
        if self.sync == "allreduce":  # version 1's name of the ring all-reduce
            object.__setattr__(self, "sync", "ring")

    def __hash__(self) -> int:
        return _cached_hash(self)

    def __getstate__(self) -> dict:
        return _state_without_hash(self)

    @cached_property
    def devices(self) -> tuple[int, ...]:
        """Indices of the devices with at least one row."""
        return tuple(d for d, r in enumerate(self.rows) if r > 0)

    @property
    def replicated(self) -> bool:
        """Whether the group's weights have more than one copy whose gradients must be summed: more than one
        device, or with a shard, more than one replica."""
        if self.shard is not None:
            return len(self.shard.replicas) > 1
        return len(self.devices) > 1

    @cached_property
    def batch_rows(self) -> tuple[int, ...]:
        """The row map over the batch (sums to it): `rows`, or with a shard each replica's rows on its first
        device only (`tag.strategy.shard.batch_rows`)."""
        return batch_rows(self.rows, self.shard)


@dataclass(frozen=True)
class Bucket:
    """One fused gradient sync: the own (unshared) gradients of `groups`, which share one replica set, summed by
    one collective. Groups are listed in reverse backward order (descending ids: the order their gradients become
    ready); `server` is the device index of a `ps` bucket."""

    groups: tuple[int, ...]
    algorithm: str
    server: int | None = None


@dataclass(frozen=True)
class Strategy:
    """Per-group decisions plus the plan-level gradient buckets and, optionally, a pipeline.

    bucket_mb: the bucket cap in MiB (2^20 bytes, as DDP's bucket_cap_mb); 0 = one bucket per group (version 1).
    buckets: explicit buckets (as read from a plan file) or None = derived from the decisions and bucket_mb
    (`tag.sim.buckets.derive_buckets`). Changing a decision drops explicit buckets: they may no longer fit it.
    Equality and hashing look at the decisions and bucket_mb only (explicit buckets record what they derive to;
    plan checking rejects buckets that do not fit the decisions).
    pipeline: stages, micro-batches and schedule (`tag.strategy.pipeline`); None = no pipelining (every group runs
    the whole batch at once, as in version 1).
    """

    decisions: tuple[Decision, ...]  # one per group, indexed by group id
    bucket_mb: float = 0.0
    buckets: tuple[Bucket, ...] | None = field(default=None, compare=False)
    pipeline: Pipeline | None = None

    def __hash__(self) -> int:
        return _cached_hash(self)

    def __getstate__(self) -> dict:
        return _state_without_hash(self)

    def replace(self, group: int, decision: Decision) -> "Strategy":
        ds = list(self.decisions)
        ds[group] = decision
        return Strategy(tuple(ds), self.bucket_mb, pipeline=self.pipeline)

    def with_decisions(self, decisions) -> "Strategy":
        """The same bucket cap and pipeline over new decisions (explicit buckets dropped)."""
        return Strategy(tuple(decisions), self.bucket_mb, pipeline=self.pipeline)


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
    n_src = len(producer_rows)
    src = 0  # both row maps tile [0, batch) in device order, so the first overlapping producer only moves forward
    for dst, (c_start, c_n) in enumerate(zip(c_off, consumer_rows)):
        if c_n == 0:
            continue
        c_end = c_start + c_n
        while src < n_src and p_off[src] + producer_rows[src] <= c_start:
            src += 1
        k = src
        while k < n_src and p_off[k] < c_end:
            lo, hi = max(c_start, p_off[k]), min(c_end, p_off[k] + producer_rows[k])
            if hi > lo and k != dst:
                out.append(Slice(k, dst, lo, hi - lo))
            k += 1
    return out


OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class TrainingConfig:
    """Training settings a plan carries (DESIGN.md § Training semantics).

    precision: one of `tag.strategy.memory_decisions.PRECISIONS` ("fp32", "tf32", "fp16", "bf16"); fp16 and bf16
    are mixed precision (autocast compute, fp32 master weights and optimizer states).
    """

    optimizer: str = "adam"
    lr: float = 1e-3
    loss: str = "mse"
    precision: str = "fp32"

    def to_json(self) -> dict:
        return {"optimizer": self.optimizer, "lr": self.lr, "loss": self.loss, "precision": self.precision}
