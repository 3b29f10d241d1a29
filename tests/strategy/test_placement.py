"""tag.strategy.placement: interval slices against a row-by-row brute force and against `slices`, and the position
placement of replicas whose positions do not follow device order (the layout deploy found the old row maps wrong on)."""

import random

from tag.strategy import Decision, slices
from tag.strategy.pieces import held_bands, needed_bands, pieces
from tag.strategy.placement import interval_slices, position_placement, rows_placement
from tag.strategy.shard import Shard


def _owner(placement, row):
    return [d for d, s, n in placement if s <= row < s + n]


def test_interval_slices_move_exactly_the_rows_held_elsewhere():
    rng = random.Random(0)
    for _ in range(200):
        n, batch = rng.randint(1, 5), rng.randint(1, 20)
        src, dst = ([0] * n for _ in range(2))
        for _ in range(batch):  # each row to a random device: row maps with zeros and uneven counts
            src[rng.randrange(n)] += 1
            dst[rng.randrange(n)] += 1
        src, dst = tuple(src), tuple(dst)
        got = interval_slices(rows_placement(src), rows_placement(dst))
        assert got == slices(src, dst)
        moved = {(s.dst, r): s.src for s in got for r in range(s.start, s.start + s.rows)}
        want = {}
        for r in range(batch):
            (p,), (c,) = _owner(rows_placement(src), r), _owner(rows_placement(dst), r)
            if p != c:
                want[(c, r)] = p
        assert moved == want


def test_positions_out_of_device_order():
    # replicas [[0, 3], [1, 2]] of 5 and 7 rows: replica 0 (first device 0) holds rows 0-4, replica 1 rows 5-11
    dec = Decision((5, 7, 7, 5), shard=Shard("row", ((0, 3), (1, 2)), (0.5, 0.5)))
    assert position_placement(dec, 0) == ((0, 0, 5), (1, 5, 7))
    assert position_placement(dec, 1) == ((2, 5, 7), (3, 0, 5))
    one = Decision((12, 0, 0, 0))  # the producer: every row on device 0
    got = pieces(held_bands(one), needed_bands(dec))
    at_position_1 = sorted((p.dst, p.start, p.rows) for p in got if p.dst in (2, 3))
    assert at_position_1 == [(2, 5, 7), (3, 0, 5)]


def test_kept_pieces_are_those_of_their_own_layouts():
    """`piece_rows` (and the position placements under it) keep their answers by layout: asked in any order over
    random sharded layouts (shares, grids and row maps differing in one field at a time), each answer equals the
    pieces computed with the memos emptied, and `piece_rows` carries exactly each piece's (src, dst, rows,
    fraction)."""
    import tag.strategy.pieces as P
    from tag.strategy.pieces import feature_bands, piece_rows

    rng = random.Random(1)
    layouts = []
    for _ in range(40):
        rows = tuple(rng.choice((4, 8)) for _ in range(4))
        shard = Shard("row", ((0, 1), (2, 3)) if rng.random() < 0.5 else ((0, 2), (1, 3)),
                      rng.choice(((0.5, 0.5), (0.25, 0.75), (0.75, 0.25))))
        dec = Decision(rows, shard=Shard(shard.split, shard.replicas, shard.ratios))
        plain = Decision(rows)
        bands = feature_bands(4, shard.ratios) if rng.random() < 0.5 else None
        layouts.append((held_bands(plain), needed_bands(dec, bands)))
        layouts.append((held_bands(dec, bands), needed_bands(plain)))
    asked = [layouts[rng.randrange(len(layouts))] for _ in range(200)]
    got = [(pieces(h, n), piece_rows(h, n)) for h, n in asked]
    for (h, n), (ps, rows) in zip(asked, got):
        P._ROWS.clear()
        P._POSITIONS.clear()
        fresh = pieces(h, n)
        assert ps == fresh
        assert rows == tuple((p.src, p.dst, p.rows, float(p.hi - p.lo)) for p in fresh)
