"""Tensor sharding (plan.json version 2 ``shard``, docs/plan.md § shards): a group's weights split across devices.

A sharded group's devices form a grid of R replicas x k shard positions (`Shard.replicas`, topology indices).
Replica r computes a contiguous slice of the batch, its rows, as a data-parallel replica does; every device of
replica r computes all of those rows (``Decision.rows[d]`` is the replica's row count on each of its k devices),
and device ``replicas[r][j]`` holds the share ``ratios[j]`` of each sharded weight along the `split`:

* ``column``: output features (a Gemm / MatMul weight's output columns, a Conv's output channels); the group's
  outputs are split by feature in the same shares.
* ``row``: input features; each device multiplies its slice of the input features and the partial products are
  summed over the replica's devices (one all-reduce).
* ``heads``: attention heads (whole heads per device) and, in an MLP block, its hidden units (a Megatron pair:
  the first projection split by columns, the second by rows, one all-reduce at the end).

Shares are the same in every replica, so the weight slices of position j line up across replicas and their
gradients are summed over the R devices of position j. `shard_sizes` turns shares into whole units (columns,
channels, heads): the one place that rounds.

`batch_rows` gives the row map of the batch over replicas (each replica's rows on its first device, 0 on the
others): the map `tag.strategy.slices` takes to say which rows move between groups.
"""

from __future__ import annotations

from dataclasses import dataclass

SPLITS = ("column", "row", "heads")
RATIO_TOL = 1e-6  # shares of a replica must sum to 1 within this


@dataclass(frozen=True)
class Shard:
    """The replica x position grid of a sharded group and each position's share of the weights (module docstring).

    split: one of SPLITS; replicas: R tuples of k >= 2 device indices, each in position order (a replica's rows sit
    in the batch where its first device sits in topology order); ratios: k positive shares summing to 1.
    """

    split: str
    replicas: tuple[tuple[int, ...], ...]
    ratios: tuple[float, ...]

    @property
    def k(self) -> int:
        """Devices per replica."""
        return len(self.ratios)

    def devices(self) -> tuple[int, ...]:
        """Every device of the grid, ascending."""
        return tuple(sorted(d for rep in self.replicas for d in rep))

    def position(self) -> dict[int, tuple[int, int]]:
        """device -> (replica index, position index)."""
        return {d: (r, j) for r, rep in enumerate(self.replicas) for j, d in enumerate(rep)}

    def peers(self, device: int) -> tuple[int, ...]:
        """The devices holding the same weight slice as `device` (its position in every replica): the set its
        weight gradients are summed over."""
        _, j = self.position()[device]
        return tuple(rep[j] for rep in self.replicas)


def shard_sizes(n: int, ratios) -> tuple[int, ...]:
    """Split `n` whole units (columns, channels, heads) by `ratios`: floor(n x r_j), the units left over going to
    the largest remainders (ties: the earlier position). Sums to n.

    >>> shard_sizes(4096, (0.75, 0.25))
    (3072, 1024)
    >>> shard_sizes(10, (1/3, 1/3, 1/3))
    (4, 3, 3)
    """
    raw = [n * r for r in ratios]
    sizes = [int(x) for x in raw]
    left = n - sum(sizes)
    order = sorted(range(len(raw)), key=lambda j: (-(raw[j] - sizes[j]), j))
    for j in order[:left]:
        sizes[j] += 1
    return tuple(sizes)


def shard_offsets(n: int, ratios) -> tuple[int, ...]:
    """First unit of each position's slice: prefix sums of `shard_sizes`.

    >>> shard_offsets(4096, (0.75, 0.25))
    (0, 3072)
    """
    out, acc = [], 0
    for s in shard_sizes(n, ratios):
        out.append(acc)
        acc += s
    return tuple(out)


def exact_units(n: int, ratios) -> bool:
    """Whether the shares split `n` units exactly (n x r_j whole for every j, within RATIO_TOL): the rule for heads.

    >>> exact_units(6, (1/3, 2/3)), exact_units(6, (0.25, 0.75))
    (True, False)
    """
    return all(abs(n * r - round(n * r)) <= RATIO_TOL * max(n, 1) for r in ratios)


def batch_rows(rows: tuple[int, ...], shard: Shard | None) -> tuple[int, ...]:
    """The decision's row map over the batch: `rows` unchanged without a shard; with one, each replica's rows on
    its first device and 0 on its other devices (so the map sums to the batch and `tag.strategy.slices` applies).

    >>> batch_rows((32, 32, 64, 64), Shard("column", ((0, 1), (2, 3)), (0.5, 0.5)))
    (32, 0, 64, 0)
    """
    if shard is None:
        return tuple(rows)
    out = [0] * len(rows)
    for rep in shard.replicas:
        out[rep[0]] = rows[rep[0]]
    return tuple(out)
