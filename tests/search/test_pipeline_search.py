"""The pipeline DP against brute force over every cut, the stage model by hand, and the strategies it builds."""

import math
import os
import random

import pytest

from tag.search.pipeline_dp import best_cuts, brute_force_cuts
from tag.search.pipeline_model import _capped_shares
from tag.search.pipeline_search import device_cut_positions, group_cut_positions, micro_batch_counts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _random_stage_fn(seed, n_groups, n_dev):
    """A stage time made of random per-group work, per-device speeds, a per-stage overhead and a memory rule that
    depends on the stages left (in-flight micro-batches): a stage is infeasible when its groups' memory x left
    exceeds its devices' summed capacity."""
    rng = random.Random(seed)
    work = [rng.uniform(1, 10) for _ in range(n_groups)]
    mem = [rng.uniform(1, 4) for _ in range(n_groups)]
    speed = [rng.choice([1.0, 2.0, 3.0]) for _ in range(n_dev)]
    cap = [rng.uniform(4, 12) for _ in range(n_dev)]
    overhead = rng.uniform(0, 3)

    def fn(left, lo, hi, dlo, dhi):
        if sum(mem[lo:hi]) * min(left, 3) > sum(cap[dlo:dhi]):
            return math.inf
        return sum(work[lo:hi]) / sum(speed[dlo:dhi]) + overhead * (dhi - dlo > 1)
    return fn


@pytest.mark.parametrize("seed", range(12))
def test_dp_matches_brute_force(seed):
    n_groups, n_dev = 6, 5
    fn = _random_stage_fn(seed, n_groups, n_dev)
    gcuts, dcuts = list(range(n_groups + 1)), list(range(n_dev + 1))
    sols = best_cuts(gcuts, dcuts, 4, fn)
    for s in range(1, 5):
        want = brute_force_cuts(gcuts, dcuts, s, fn)
        if math.isinf(want):
            assert s not in sols
            continue
        assert sols[s].slowest_ms == pytest.approx(want, rel=1e-12)
        # the returned cuts are a valid pipeline achieving that value
        st = sols[s].stages
        assert len(st) == s and st[0].lo == 0 and st[-1].hi == n_groups and st[0].dlo == 0
        assert all(a.hi == b.lo and a.dhi == b.dlo for a, b in zip(st, st[1:]))
        assert max(fn(s - i, c.lo, c.hi, c.dlo, c.dhi) for i, c in enumerate(st)) == pytest.approx(want)


def test_dp_on_restricted_cut_positions_matches_brute_force():
    fn = _random_stage_fn(99, 9, 8)
    gcuts, dcuts = [0, 2, 3, 6, 9], [0, 2, 4, 8]
    sols = best_cuts(gcuts, dcuts, 3, fn)
    for s in (1, 2, 3):
        want = brute_force_cuts(gcuts, dcuts, s, fn)
        assert (sols[s].slowest_ms if s in sols else math.inf) == pytest.approx(want)


def test_dp_by_hand():
    # 4 equal groups, 2 equal devices, no overhead: one stage on both devices takes 4 / 2 = 2; two stages of two
    # groups on one device each take 2 each
    fn = lambda left, lo, hi, dlo, dhi: (hi - lo) / (dhi - dlo)  # noqa: E731
    sols = best_cuts([0, 1, 2, 3, 4], [0, 1, 2], 2, fn)
    assert sols[1].slowest_ms == 2.0 and sols[2].slowest_ms == 2.0
    assert [(c.lo, c.hi, c.dlo, c.dhi) for c in sols[2].stages] == [(0, 2, 0, 1), (2, 4, 1, 2)]


def test_capped_shares():
    assert _capped_shares(8, [3.0, 1.0], [8, 8]) == [6, 2]
    assert _capped_shares(8, [3.0, 1.0], [5, 8]) == [5, 3]
    assert _capped_shares(10, [1.0, 1.0, 1.0], [10, 10, 10]) in ([4, 3, 3], [3, 4, 3], [3, 3, 4])
    assert _capped_shares(10, [1.0, 1.0], [4, 4]) is None
    assert _capped_shares(2, [1.0, 1.0, 1.0], [5, 5, 5]) is None  # every replica needs a row
    for ws, caps, total in [([5.0, 1.0, 1.0], [3, 9, 9], 12), ([1.0, 2.0], [1, 9], 10)]:
        r = _capped_shares(total, ws, caps)
        assert sum(r) == total and all(1 <= x <= c for x, c in zip(r, caps))


def test_cut_positions():
    assert micro_batch_counts(12, 64) == [1, 2, 3, 4, 6, 12]
    assert group_cut_positions([1.0] * 4, 10) == [0, 1, 2, 3, 4]
    assert group_cut_positions([1.0] * 8, 5) == [0, 2, 4, 6, 8]
    assert group_cut_positions([6.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 3) == [0, 1, 7]  # half the weight in group 0
    assert device_cut_positions([2, 2], 17) == [0, 1, 2, 3, 4]
    assert device_cut_positions([8, 8], 5) == [0, 8, 16]
    assert device_cut_positions([8] * 8, 17) == list(range(0, 65, 8))
    assert device_cut_positions([4, 2, 2, 2, 2, 2, 2], 17) == list(range(17))
    assert device_cut_positions([2] * 20, 11) == list(range(0, 41, 4))


def _load(model, topo):
    from tag.modelio import ModelOptions, load_inputs

    return load_inputs(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"),
                       os.path.join(ROOT, "datasets", "topologies", f"{topo}.json"), ModelOptions())


def test_dp_over_the_real_stage_model_matches_brute_force():
    from tag.search.pipeline_model import StageModel

    inp = _load("gpt2_tiny", "heterog8")
    order = [d.index for d in inp.cluster.devices]
    model = StageModel(inp.gg, inp.cluster, inp.cost, inp.training.optimizer, inp.batch_size, order)
    m = 4
    gcuts = group_cut_positions([g.fwd_flops_per_row for g in inp.gg.groups], 7)
    dcuts = [0, 2, 4, 6, 8]

    def fn(left, lo, hi, dlo, dhi):
        st = model.stage(lo, hi, dlo, dhi, m, min(left, m))
        return math.inf if st is None else st.stage_ms(m)
    sols = best_cuts(gcuts, dcuts, 3, fn)
    for s in (1, 2, 3):
        assert sols[s].slowest_ms == pytest.approx(brute_force_cuts(gcuts, dcuts, s, fn), rel=1e-12)


def test_stage_model_by_hand():
    """One stage of every group on two devices of one type: rows split evenly, compute = the cost model's time
    at half the micro-batch, no transfer (no neighbours), ring sync of all parameters at the link's rate."""
    from tag.search.pipeline_model import StageModel

    inp = _load("mlp", "cpu4")
    gg, cluster, cost = inp.gg, inp.cluster, inp.cost
    b = inp.batch_size
    model = StageModel(gg, cluster, cost, "adam", b, [0, 1])
    st = model.stage(0, gg.n_groups, 0, 2, 2, 1)
    half = b // 4  # m = 2 micro-batches of b / 2 rows, half each
    assert st.micro_rows == (half, half)
    t = cluster.devices[0].type
    want = sum(cost.group_fwd_ms(g.id, t, half) + cost.group_bwd_ms(g.id, t, half) for g in gg.groups)
    knots = model.knots
    if half in knots:  # knot-interpolated times are exact at powers of two
        assert st.compute_ms == pytest.approx(want, rel=1e-9)
    assert st.transfer_ms == 0.0
    params = sum(g.param_bytes for g in gg.groups)
    bw = cluster.bandwidth_gbps[0][1] * 1e9 / 8 / 1e3
    assert st.sync_ms == pytest.approx(2 * (2 - 1) / 2 * params / bw)
    # two micro-batches, no transfer, the sync less the last backward (2/3 of a micro-batch's compute)
    assert st.stage_ms(2) == pytest.approx(2 * st.compute_ms + max(0.0, st.sync_ms - 2 / 3 * st.compute_ms))


@pytest.mark.parametrize("model, topo", [("bert_large", "heterog8"), ("gpt2_medium", "modern8")])
def test_candidates_are_valid_pipelines(model, topo):
    from tag.search.pipeline_search import pipeline_candidates
    from tag.strategy.pipeline import micro_rows

    inp = _load(model, topo)
    cands = pipeline_candidates(inp.gg, inp.cluster, inp.cost, inp.training, inp.batch_size)
    assert cands
    assert len({c.name for c in cands}) == len(cands)  # names are unique (the structure tree's actions use them)
    for c in cands:
        pl = c.strategy.pipeline
        if pl is None:  # one stage, one micro-batch: plain data parallelism
            assert c.name == "dp-balanced" or c.name.startswith("dp-balanced-v")  # -v2: other rows, same kind
            assert all(sum(d.rows) == inp.batch_size for d in c.strategy.decisions)
            continue
        assert len(pl.stages) > 1 or pl.micro_batches > 1
        m = pl.micro_batches
        assert inp.batch_size % m == 0
        stage_of = pl.stage_of_group()
        assert sorted(stage_of) == list(range(inp.gg.n_groups))
        for e in inp.gg.edges:  # acyclic cut: edges go forward
            assert stage_of[e.src] <= stage_of[e.dst]
        used = [d for st in pl.stages for d in st.devices]
        assert len(used) == len(set(used))
        for g, dec in enumerate(c.strategy.decisions):
            assert sum(dec.rows) == inp.batch_size
            assert set(dec.devices) <= set(pl.stages[stage_of[g]].devices)
            assert all(r >= 1 for r in micro_rows(dec.rows, m) if r)


def test_plan_with_and_without_pipelines():
    """The two-wide-layers case (tests/search/test_search_plan_guarantees.py): every baseline is out of memory;
    with pipelines the search returns a fitting micro-batched plan, without them none is considered."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_search_plan_guarantees import FlatCost, two_wide_layers

    from tag.search.planner import plan
    from tag.strategy import TrainingConfig

    gg, cluster = two_wide_layers()
    training = TrainingConfig(optimizer="adam")
    on = plan(gg, cluster, FlatCost(), training, playouts=4, refine_simulations=10, seed=0, sfb=False)
    assert on.pipelines and on.candidates
    assert any(not r.oom for _, r in on.candidates.values())
    assert not on.result.oom
    off = plan(gg, cluster, FlatCost(), training, playouts=4, refine_simulations=10, seed=0, sfb=False,
               pipeline=False)
    assert not off.pipelines and not off.candidates and off.strategy.pipeline is None


@pytest.mark.parametrize("flag, considered", [([], True), (["--no-pipeline"], False)])
def test_cli_no_pipeline_flag(capsys, flag, considered):
    import json

    from tag.cli import main

    rc = main(["plan", os.path.join(ROOT, "datasets", "models", "mlp.onnx"),
               os.path.join(ROOT, "datasets", "topologies", "cpu4.json"), "--no-gnn", "--no-sfb",
               "--playouts", "2", "--simulations", "4", "--json", *flag])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["search"]["pipelines"] is considered
    if not considered:
        assert "stages" not in obj


def test_estimate_by_hand():
    """Two stages, m = 4: compute 30 ms per micro-batch each, one crossing 10 ms each way, syncs 60 and 30 ms.
    1F1B (unit 1): round trip 60 + 2 x 10 = 80 over S = 2 in flight -> 40 ms per micro-batch (above the compute's
    30); pipeline 3 x 40 + 60 + 10 (fill: no pile-up, 10 is not above a forward's 30 / 3) + 10 = 200; stage 0's
    sync 60 less its last backward 20 = 40 exposed (stage 1's: 30 - 20 - the 30 ms drain before it, hidden): 240.
    kFkB k = 2: (2 x 60 + 20 / 2) / (2 x 2) = 32.5 per micro-batch: 97.5 + 80 + 40 = 217.5. GPipe: (4 x 60 + 5) / 8
    = 30.625: 91.875 + 80 + 40 = 211.875. A stage 0 of 15 ms (forward 5 < the 10 ms crossing) piles up its
    min(m, S - 0) = 2 warm-up forwards on the NIC: fill 20 instead of 10."""
    from tag.search.pipeline_model import StageRows
    from tag.search.pipeline_search import estimate_ms

    a = StageRows((1,), 30.0, 10.0, 60.0, 0, in_ms=0.0, out_ms=10.0)
    b = StageRows((1,), 30.0, 10.0, 30.0, 0, in_ms=10.0, out_ms=0.0)
    assert estimate_ms([a, b], 4, "1f1b", 1) == pytest.approx(240.0)
    assert estimate_ms([a, b], 4, "kfkb", 2) == pytest.approx(217.5)
    assert estimate_ms([a, b], 4, "gpipe", 1) == pytest.approx(211.875)
    fast = StageRows((1,), 15.0, 10.0, 0.0, 0, in_ms=0.0, out_ms=10.0)
    # period max(30, (45 + 20) / 2 = 32.5); pipeline 3 x 32.5 + 45 + 20 + 10; stage 1's sync 30 - 20 - (10 + 10)
    assert estimate_ms([fast, b], 4, "1f1b", 1) == pytest.approx(3 * 32.5 + 45 + 20 + 10)


def test_cheap_cut_positions_offer_every_stretch_its_cheapest_cut():
    from tag.search.pipeline_search import cheap_cut_positions

    # a transformer-like pattern: every 4th boundary carries 1 unit, the others 2-5, one boundary near the end 0.01;
    # the globally cheapest boundary alone would leave only position 13 to cut at
    cross = [0.0] + [1.0, 2.0, 1.0, 5.0] * 3 + [0.01, 3.0]
    got = cheap_cut_positions(cross, [1.0] * 15, 25, window=2)
    # the 1-unit boundaries 1, 3, ..., 9 are the cheapest within 2 positions; 11 is not (13 is two away)
    assert got == [0, 1, 3, 5, 7, 9, 13, 15]
