"""Exact shortcuts of the simulator (issue 24 must-show 4, part 13), each against the computation it skips:
`max_min_rates`' memo of flow sets met before, and `own_sync_bytes`' answer kept for the same decisions tuple;
and simulate() on the datasets' small models with every baseline, with the memo and with it bypassed."""

from __future__ import annotations

import copy
import os
import random

import pytest

import tag.sim.network as network
from tag.sim.network import Flow, max_min_rates

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _flow_sets(rng, n_sets: int = 12):
    """A few distinct flow sets over 8 links (a set repeats, in the same or another order, or with the same links
    and other weights)."""
    sets = []
    for _ in range(n_sets):
        flows = []
        for _ in range(rng.randint(2, 9)):
            ls = tuple(sorted(rng.sample(range(8), rng.randint(1, 3))))
            flows.append(Flow(ls, tuple(float(rng.randint(1, 3)) for _ in ls), 1.0, 0.0))
        sets.append(flows)
    return sets


@pytest.mark.parametrize("seed", range(5))
def test_memoised_rates_equal_the_filling_bit_for_bit(seed):
    rng = random.Random(seed)
    caps = [rng.choice([1.0, 2.5, 5.0, 10.0]) for _ in range(8)]
    sets = _flow_sets(rng)
    memo: dict = {}
    for _ in range(60):
        flows = copy.deepcopy(rng.choice(sets))
        if rng.random() < 0.3:
            rng.shuffle(flows)  # another order: another key (the filling's ties may depend on it)
        if rng.random() < 0.2:
            flows[0].weights = tuple(w + 1.0 for w in flows[0].weights)
        plain = copy.deepcopy(flows)
        max_min_rates(flows, caps, memo)
        max_min_rates(plain, caps)
        assert [f.rate for f in flows] == [f.rate for f in plain]
    assert 0 < len(memo) < 60  # sets did repeat


def test_rate_memo_is_per_capacity_vector():
    a, b = network.rate_memo([1.0, 2.0]), network.rate_memo([1.0, 2.0])
    assert a is b and network.rate_memo([1.0, 3.0]) is not a
    f = [Flow((0,), (1.0,), 1.0, 0.0), Flow((0, 1), (1.0, 1.0), 1.0, 0.0)]
    max_min_rates(f, [1.0, 2.0], a)
    g = copy.deepcopy(f)
    max_min_rates(g, [1.0, 3.0], network.rate_memo([1.0, 3.0]))
    assert [x.rate for x in f] == [0.5, 0.5] and [x.rate for x in g] == [0.5, 0.5]


def test_own_sync_bytes_kept_answer_equals_the_computation():
    from tag.sim.buckets import _own_sync_bytes, own_sync_bytes

    gg, _, _, _, strategies = _small_case("bert_tiny", "heterog8")
    for s in strategies + strategies[::-1]:
        want = _own_sync_bytes(gg, s.decisions)
        assert own_sync_bytes(gg, s.decisions) == want and own_sync_bytes(gg, s.decisions) == want
        got = own_sync_bytes(gg, s.decisions)
        got[0] = -1.0  # the caller's copy: the kept answer does not change
        assert own_sync_bytes(gg, s.decisions) == want
    decs = list(strategies[0].decisions)  # a list may change under the same identity: not kept
    assert own_sync_bytes(gg, decs) == _own_sync_bytes(gg, decs)
    decs[:] = strategies[-1].decisions
    assert own_sync_bytes(gg, decs) == _own_sync_bytes(gg, decs)


def _small_case(model: str, topology: str):
    """(gg, cluster, cost, training, every baseline's strategy) as `tag simulate` loads them."""
    from tag.modelio import load_inputs
    from tag.search.baselines import run_baselines

    inp = load_inputs(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"),
                      os.path.join(ROOT, "datasets", "topologies", f"{topology}.json"))
    base = run_baselines(inp.gg, inp.cluster, inp.cost, inp.training)
    return inp.gg, inp.cluster, inp.cost, inp.training, [base[k][0] for k in sorted(base)]


@pytest.mark.parametrize("model,topology", [("bert_tiny", "heterog8"), ("dlrm_tiny", "tag16")])
def test_simulations_with_and_without_the_memo_are_identical(model, topology, monkeypatch):
    from tag.sim import simulate

    gg, cluster, cost, training, strategies = _small_case(model, topology)
    runs = []
    network._RATE_MEMOS.clear()
    for bypass in (False, True, False):  # cold memo, no memo, warm memo
        if bypass:
            monkeypatch.setattr(network, "_memoised", lambda flows, caps, memo, fill: fill(flows, caps))
        else:
            monkeypatch.undo()
        runs.append([repr(simulate(gg, cluster, cost, s, training, **kw)) for s in strategies
                     for kw in ({}, {"overlap_sync": False, "blocking_sends": True})])
    assert runs[0] == runs[1] == runs[2]
    assert sum(map(len, network._RATE_MEMOS.values())) > 0  # flow sets were memoised
