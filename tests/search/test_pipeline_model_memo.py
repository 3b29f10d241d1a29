"""The stage model's shortcuts against the plain computations they replace: `_capped_shares` against the
dict-based water filling it was, and `StageModel.stage` (its compute part memoised per block kind, its transfer
times per boundary, bandwidths as Python floats) against a model that computes every stage from scratch on numpy
scalars."""

import math
import os
import random

import pytest

from tag.search.pipeline_model import StageModel, _capped_shares

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _capped_shares_reference(total, weights, caps):
    """The water filling as first written (dicts, full sort; the leftover rows handed out pass by pass as whole
    slices), kept as the second method."""
    n = len(weights)
    if sum(caps) < total or total < n:
        return None
    fixed: dict[int, int] = {}
    while True:
        free = [i for i in range(n) if i not in fixed]
        share = {}
        if not free:
            break
        left = total - sum(fixed.values())
        w = sum(weights[i] for i in free)
        share = {i: left * weights[i] / w for i in free}
        over = [i for i in free if share[i] > caps[i]]
        if not over:
            break
        for i in over:
            fixed[i] = caps[i]
    rows = [fixed.get(i, 0) for i in range(n)]
    floors = {i: max(1, min(caps[i], int(math.floor(share[i])))) for i in free}
    for i in free:
        rows[i] = floors[i]
    # the leftover rows in passes: each pass gives one row to each of the first |diff| replicas (largest fractional
    # part first) that can take one, or takes one back from the first that can give (smallest part first, then the
    # capped ones)
    order = sorted(free, key=lambda i: (-(share[i] - math.floor(share[i])), i))
    give_back = order[::-1] + [i for i in range(n) if i not in share]
    while sum(rows) != total:
        diff = total - sum(rows)
        if diff > 0:
            step = [i for i in order if rows[i] < caps[i]][:diff]
        else:
            step = [i for i in give_back if rows[i] > 1][:-diff]
        if not step:
            return None
        for i in step:
            rows[i] += 1 if diff > 0 else -1
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_capped_shares_matches_reference(seed):
    rng = random.Random(seed)
    for _ in range(2000):
        n = rng.randint(1, 9)
        total = rng.randint(1, 80)
        weights = [rng.choice([1.0, 2.0, 3.0, rng.uniform(0.01, 5.0)]) for _ in range(n)]
        caps = [rng.randint(1, 40) if rng.random() < 0.5 else total for _ in range(n)]
        assert _capped_shares(total, weights, caps) == _capped_shares_reference(total, weights, caps)


class _Plain(StageModel):
    """The stage model without the block-kind and transfer memos (every call computes from scratch) and with its
    bandwidths read from the numpy matrix (numpy scalars) instead of the lists of Python floats."""

    def __init__(self, *args):
        super().__init__(*args)
        self._bw = self.bw_bytes_per_ms

    def stage(self, lo, hi, dlo, dhi, micro_batches, in_flight):
        self._rows.clear()
        self._moved.clear()
        return super().stage(lo, hi, dlo, dhi, micro_batches, in_flight)


def test_stage_memos_match_plain_model():
    from tag.modelio import load_inputs

    inp = load_inputs(os.path.join(ROOT, "datasets", "models", "resnet50.onnx"),
                      os.path.join(ROOT, "datasets", "topologies", "modern8.json"))
    order = [d.index for d in inp.cluster.devices]
    args = (inp.gg, inp.cluster, inp.cost, "adam", inp.batch_size, order)
    fast, plain = StageModel(*args), _Plain(*args)
    rng = random.Random(0)
    n_g, n_d = inp.gg.n_groups, len(order)
    seen = 0
    for _ in range(600):
        lo = rng.randrange(n_g)
        hi = rng.randrange(lo + 1, n_g + 1)
        dlo = rng.randrange(n_d)
        dhi = rng.randrange(dlo + 1, n_d + 1)
        m, k = rng.choice([1, 2, 4, 8]), rng.randint(1, 8)
        st, ref = fast.stage(lo, hi, dlo, dhi, m, k), plain.stage(lo, hi, dlo, dhi, m, k)
        assert st == ref
        if st is not None:
            seen += 1
            assert (st.transfer_ms, st.sync_ms, st.in_ms, st.out_ms) == (ref.transfer_ms, ref.sync_ms, ref.in_ms,
                                                                         ref.out_ms)
    assert seen > 100
    assert len(fast._rows) < 600 and len(fast._moved) < seen  # blocks of one kind / equal boundaries shared
