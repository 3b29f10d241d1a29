"""Row x feature pieces: what moves between a producer's layout of a tensor and a consumer's (tensor sharding).

`tag.strategy.slices` says which batch rows move between two row maps. With shards (`tag.strategy.shard`) a
device may hold or need only a band of a tensor's features, and several devices may hold the same rows (the k
devices of a replica). A **layout** of one tensor is a list of `Band`: features [lo, hi) (fractions of the
tensor's features, exact) held or needed by the devices of one placement (`tag.strategy.placement`):

* held (`held_bands`): the bands partition [0, 1); each band lists one or more alternative placements, any of which
  holds every row of the band (the k positions of a replica that all hold the tensor whole);
* needed (`needed_bands`): every band's one placement must be served (each position of a replica needs its rows).

`pieces(held, needed)` serves each needed band from the overlapping held bands: for each, the alternative that
moves the fewest rows (ties: the first), then exactly `tag.strategy.placement.interval_slices` between the two
placements, cut to the overlap of the features. Without shards both layouts are one band [0, 1) of the decision's row map, and the pieces are
`slices(producer rows, consumer rows)` with the whole features: the row slices as before.

Gradients flow back the same way with the roles swapped: the consumer's layout of the input gradient is held, the
producer's layout of its output is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from tag.strategy.placement import Placement, interval_slices, position_placement, rows_placement
from tag.strategy.shard import shard_sizes

WHOLE = (Fraction(0), Fraction(1))


@dataclass(frozen=True)
class Band:
    """Features [lo, hi) of a tensor over the placements `maps` (`tag.strategy.placement`; alternatives when held,
    exactly one when needed)."""

    lo: Fraction
    hi: Fraction
    maps: tuple[Placement, ...]


@dataclass(frozen=True)
class Piece:
    """Rows [start, start + rows) and features [lo, hi) of a tensor sent from device src to device dst."""

    src: int
    dst: int
    start: int
    rows: int
    lo: Fraction
    hi: Fraction

    @property
    def fraction(self) -> Fraction:
        """The share of the rows' features the piece carries."""
        return self.hi - self.lo


def feature_bands(units: int, ratios) -> list[tuple[Fraction, Fraction]]:
    """Each position's features as fractions [lo, hi): its whole units of `units` (`shard_sizes`).

    >>> feature_bands(4, (0.25, 0.75))
    [(Fraction(0, 1), Fraction(1, 4)), (Fraction(1, 4), Fraction(1, 1))]
    """
    out, acc = [], 0
    for s in shard_sizes(units, ratios):
        out.append((Fraction(acc, units), Fraction(acc + s, units)))
        acc += s
    return out


def held_bands(decision, bands=None) -> list[Band]:
    """What a decision's devices hold of a tensor: its rows, whole; with a shard, each position's rows (every
    position whole, as alternatives) or, given `bands` (one (lo, hi) per position), position j only band j."""
    if decision.shard is None:
        return [Band(*WHOLE, (rows_placement(decision.rows),))]
    places = _positions(decision)
    if bands is None:
        return [Band(*WHOLE, places)]
    return [Band(lo, hi, (places[j],)) for j, (lo, hi) in enumerate(bands)]


def needed_bands(decision, bands=None) -> list[Band]:
    """What a decision's devices need of a tensor: its rows, whole; with a shard every position its replica's rows,
    whole or, given `bands`, band j at position j."""
    if decision.shard is None:
        return [Band(*WHOLE, (rows_placement(decision.rows),))]
    places = _positions(decision)
    spans = [WHOLE] * len(places) if bands is None else bands
    return [Band(lo, hi, (places[j],)) for j, (lo, hi) in enumerate(spans)]


def _positions(decision) -> tuple:
    """`position_placement(decision, j)` for every position j of a sharded decision, kept per decision (a build
    asks for each tensor of each edge)."""
    return _kept(_POSITIONS, decision, lambda: tuple(position_placement(decision, j) for j in range(decision.shard.k)))


def piece_rows(held: list[Band], needed: list[Band]) -> tuple[tuple[int, int, int, float], ...]:
    """(src, dst, rows, float(fraction)) of each of `pieces(held, needed)`, in its order: what the simulator reads of
    them, kept per pair of layouts (consecutive sharded groups hold and need the same bands of every tensor between
    them, edge after edge: `tag.sim.shards.shard_edge_pairs`)."""
    return _kept(_ROWS, (tuple(held), tuple(needed)),
                 lambda: tuple((p.src, p.dst, p.rows, float(p.fraction)) for p in pieces(held, needed)))


_POSITIONS: dict = {}  # sharded decision -> its position placements
_ROWS: dict = {}  # (held, needed) as tuples -> `piece_rows`
_MEMO_MAX_ENTRIES = 4096  # each memo is emptied when it reaches this many


def _kept(memo: dict, key, make):
    """memo[key], made by make() the first time it is asked for."""
    got = memo.get(key)
    if got is None:
        if len(memo) >= _MEMO_MAX_ENTRIES:
            memo.clear()
        got = memo[key] = make()
    return got


def pieces(held: list[Band], needed: list[Band]) -> list[Piece]:
    """The pieces that serve `needed` from `held` (module docstring), in needed-band order, then by (dst, start).

    >>> from tag.strategy import Decision
    >>> from tag.strategy.shard import Shard
    >>> one = Decision((8, 0))
    >>> two = Decision((8, 8), shard=Shard("row", ((0, 1),), (0.25, 0.75)))
    >>> pieces(held_bands(one), needed_bands(two, feature_bands(4, (0.25, 0.75))))
    [Piece(src=0, dst=1, start=0, rows=8, lo=Fraction(1, 4), hi=Fraction(1, 1))]
    >>> pieces(held_bands(two), needed_bands(two))  # every position holds the tensor whole: nothing moves
    []
    """
    out: list[Piece] = []
    for nb in needed:
        cmap = nb.maps[0]
        for hb in held:
            lo, hi = max(nb.lo, hb.lo), min(nb.hi, hb.hi)
            if hi <= lo:
                continue
            best = None
            for pmap in hb.maps:
                found = interval_slices(pmap, cmap)
                if best is None or sum(s.rows for s in found) < sum(s.rows for s in best):
                    best = found
            out += [Piece(s.src, s.dst, s.start, s.rows, lo, hi) for s in best]
    return out
