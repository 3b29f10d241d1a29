"""`solve_sfb_pool` lists the model's best subsets on one model, with cuts appended: the same model, constraint for
constraint, and the same answers as building it again for every solve with the subsets before excluded."""

from __future__ import annotations

import pytest
from sfbkit import TRAINING, random_instance

from tag.compression import eligible_ops
from tag.compression.model import build_sfb_model, solve_sfb_model, solve_sfb_pool
from tag.compression.terms import build_terms
from tag.sim import simulate


def _terms(seed: int):
    gg, cl, cost, s = random_instance(seed)
    cands = eligible_ops(gg, s)
    traced = simulate(gg, cl, cost, s, TRAINING, trace=True)
    return build_terms(gg, cl, cost, TRAINING, s, cands, traced), len(cands)


@pytest.mark.parametrize("seed", [0, 3, 8])
def test_pool_solves_the_rebuilt_models(seed):
    terms, n = _terms(seed)
    count = min(6, 2 ** n)
    pool = solve_sfb_pool(terms, count)
    seen: list[list[int]] = []
    for got in pool:  # the reference: a fresh model per solve, the subsets before cut off
        want = solve_sfb_model(terms, exclude=list(seen))
        assert (got.chosen, got.status, got.objective_ms, got.empty_ms) == \
            (want.chosen, want.status, want.objective_ms, want.empty_ms)
        if got.status not in ("OPTIMAL", "FEASIBLE"):
            break
        seen.append(got.chosen)
    assert len(pool) == count or pool[-1].status not in ("OPTIMAL", "FEASIBLE")
    assert len({tuple(r.chosen) for r in pool if r.status in ("OPTIMAL", "FEASIBLE")}) == len(seen)  # all differ


def test_cuts_appended_give_the_same_model_proto():
    terms, n = _terms(3)
    subsets = [[0], [], list(range(n))]
    incremental = build_sfb_model(terms)
    for sub in subsets:
        incremental.exclude(sub)
    fresh = build_sfb_model(terms, exclude=subsets)
    text = str(fresh.model.Proto())  # text format: every variable, constraint and the objective, in order
    assert "constraints" in text and str(incremental.model.Proto()) == text


def test_every_subset_listed_then_none_left():
    terms, n = _terms(6)
    assert n == 4  # 16 subsets
    pool = solve_sfb_pool(terms, 2 ** n + 1)  # one more solve than there are subsets: the last finds none
    found = [tuple(r.chosen) for r in pool if r.status in ("OPTIMAL", "FEASIBLE")]
    assert sorted(found) == sorted({tuple(i for i in range(n) if m >> i & 1) for m in range(2 ** n)})
    assert pool[-1].status == "INFEASIBLE"
