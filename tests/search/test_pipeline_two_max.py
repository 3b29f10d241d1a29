"""The pipeline DP's two-part objective (issue 21, hap64): max steady part + max exposed sync, against brute force
over every cut and by hand; the stage model's split of a stage's time into those parts."""

import math
import random

import pytest

from tag.search.pipeline_dp import best_capped_cuts, best_cuts, brute_force_two_max
from tag.search.pipeline_model import StageRows


def _random_parts(seed, n_groups, n_dev):
    """A steady part made of random per-group work over per-device speeds, with a memory rule on the stages left
    (infeasible: inf), and a tail that grows with the stage's parameters and its device count (a sync)."""
    rng = random.Random(seed)
    work = [rng.uniform(1, 10) for _ in range(n_groups)]
    params = [rng.choice([0.0, 1.0, 4.0]) for _ in range(n_groups)]
    mem = [rng.uniform(1, 4) for _ in range(n_groups)]
    speed = [rng.choice([1.0, 2.0, 3.0]) for _ in range(n_dev)]
    cap = [rng.uniform(4, 12) for _ in range(n_dev)]

    def steady(left, lo, hi, dlo, dhi):
        if sum(mem[lo:hi]) * min(left, 3) > sum(cap[dlo:dhi]):
            return math.inf
        return sum(work[lo:hi]) / sum(speed[dlo:dhi])

    def tail(left, lo, hi, dlo, dhi):
        return sum(params[lo:hi]) * (dhi - dlo - 1)
    return steady, tail


def _all_tails(gcuts, dcuts, max_stages, tail):
    return sorted({tail(t, a, b, c, d) for t in range(1, max_stages + 1) for a in gcuts for b in gcuts if a < b
                   for c in dcuts for d in dcuts if c < d})


@pytest.mark.parametrize("seed", range(10))
def test_capped_dp_over_every_tail_matches_brute_force(seed):
    """With every distinct tail value as a cap, the least max steady + max tail over the DP's solutions is the
    brute-force optimum of that objective, and every solution is a valid pipeline whose fields are its own."""
    n_groups, n_dev, max_st = 6, 5, 4
    steady, tail = _random_parts(seed, n_groups, n_dev)
    gcuts, dcuts = list(range(n_groups + 1)), list(range(n_dev + 1))
    caps = [math.inf] + _all_tails(gcuts, dcuts, max_st, tail)
    sols = best_capped_cuts(gcuts, dcuts, max_st, steady, tail, caps)
    for s in range(1, max_st + 1):
        want = brute_force_two_max(gcuts, dcuts, s, steady, tail)
        if math.isinf(want):
            assert s not in sols
            continue
        assert min(x.two_max_ms for x in sols[s]) == pytest.approx(want, rel=1e-12)
        for sol in sols[s]:
            st = sol.stages
            assert len(st) == s and st[0].lo == 0 and st[-1].hi == n_groups and st[0].dlo == 0
            assert all(a.hi == b.lo and a.dhi == b.dlo for a, b in zip(st, st[1:]))
            args = [(s - i, c.lo, c.hi, c.dlo, c.dhi) for i, c in enumerate(st)]
            assert sol.slowest_ms == pytest.approx(max(steady(*a) for a in args))
            assert sol.tail_ms == pytest.approx(max(tail(*a) for a in args))
        assert len({x.stages for x in sols[s]}) == len(sols[s])  # distinct cuts only


def test_capped_dp_on_restricted_positions_and_a_coarse_ladder_bounds_the_optimum():
    """On restricted cut positions the exact ladder still matches brute force; a coarse ladder (no cap, or one cap)
    gives an upper bound, and no cap is the plain minimax of the steady part plus that solution's tail."""
    steady, tail = _random_parts(7, 9, 8)
    gcuts, dcuts = [0, 2, 3, 6, 9], [0, 2, 4, 8]
    exact = best_capped_cuts(gcuts, dcuts, 3, steady, tail, [math.inf] + _all_tails(gcuts, dcuts, 3, tail))
    coarse = best_capped_cuts(gcuts, dcuts, 3, steady, tail, [math.inf])
    plain = best_cuts(gcuts, dcuts, 3, steady)
    for s in exact:
        want = brute_force_two_max(gcuts, dcuts, s, steady, tail)
        assert min(x.two_max_ms for x in exact[s]) == pytest.approx(want)
        assert coarse[s][0].two_max_ms >= want - 1e-9
        assert coarse[s][0].slowest_ms == plain[s].slowest_ms and coarse[s][0].stages == plain[s].stages


def _two_stage(n_groups, tail_per_group, caps):
    """n equal groups (steady 1 each) on 2 equal devices, 2 stages (one device each); only the first stage syncs,
    with a tail of `tail_per_group` per group it holds. Returns (best_capped_cuts' solutions, the plain minimax
    of steady + tail's solution)."""
    def steady(left, lo, hi, dlo, dhi):
        return float(hi - lo) / (dhi - dlo)

    def tail(left, lo, hi, dlo, dhi):
        return tail_per_group * (hi - lo) * (dlo == 0)

    gcuts, dcuts = list(range(n_groups + 1)), [0, 1, 2]
    both = best_cuts(gcuts, dcuts, 2, lambda *a: steady(*a) + tail(*a))[2]
    return best_capped_cuts(gcuts, dcuts, 2, steady, tail, caps)[2], both


def test_two_max_by_hand_against_the_sum_per_stage():
    """6 groups, tail 0.5 per group, cuts a | 6 - a. Per stage steady + tail, max(1.5 a, 6 - a), is least at a = 2
    (max(3, 4) = 4), a pipeline that pays its steady state max(2, 4) = 4 and the tail 1: 5. Paid once each,
    max(a, 6 - a) + 0.5 a is 5.5, 5, 4.5, 6, 7.5 for a = 1 .. 5: a = 3, 4.5, which no cap needs (the minimax
    of the steady part alone, 3 | 3)."""
    sols, both = _two_stage(6, 0.5, [math.inf])
    assert both.stages[0].hi == 2 and both.slowest_ms == 4.0
    assert [(c.stages[0].hi, c.slowest_ms, c.tail_ms, c.two_max_ms) for c in sols] == [(3, 3.0, 1.5, 4.5)]


def test_two_max_by_hand_needs_a_cap():
    """4 groups, tail 6 per group: a | 4 - a costs max(a, 4 - a) + 6 a = 9, 14, 21 for a = 1, 2, 3. The steady part
    alone (no cap) picks 2 | 2 (14); the cap 6 leaves a = 1 only (9); the caps 12 and 18 find 2 | 2 again (one
    solution per distinct cut)."""
    sols, both = _two_stage(4, 6.0, [math.inf, 6.0, 12.0, 18.0])
    assert [(c.stages[0].hi, c.two_max_ms) for c in sols] == [(2, 14.0), (1, 9.0)]
    assert both.stages[0].hi == 1  # here the sum per stage, max(7, 3), agrees


def test_stage_rows_parts_by_hand():
    """compute 30, transfer 10, sync 60 over m = 4: steady 4 x 30 + 10 = 130, exposed sync 60 - 2/3 x 30 = 40,
    stage time 170; a transfer-bound stage (compute 5, transfer 10): 4 x 10 + 10 = 50 and the sync 60 - 10/3."""
    st = StageRows((1,), 30.0, 10.0, 60.0, 0)
    assert st.steady_ms(4) == pytest.approx(130.0)
    assert st.exposed_sync_ms() == pytest.approx(40.0)
    assert st.stage_ms(4) == pytest.approx(170.0)
    nic = StageRows((1,), 5.0, 10.0, 60.0, 0)
    assert nic.steady_ms(4) == pytest.approx(50.0)
    assert nic.stage_ms(4) == pytest.approx(50.0 + 60.0 - 10.0 / 3.0)


def test_sync_caps_by_hand():
    """The caps: none, then the whole model's ring all-reduce over the 4 ranks of cpu4 (one machine, 20 Gb/s:
    2 x 3/4 x parameter bytes / 2.5 bytes per ns) divided by 4, 16, 64."""
    import os

    from tag.modelio import ModelOptions, load_inputs
    from tag.search.pipeline_model import StageModel
    from tag.search.pipeline_search import sync_caps

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    inp = load_inputs(os.path.join(root, "datasets", "models", "mlp.onnx"),
                      os.path.join(root, "datasets", "topologies", "cpu4.json"), ModelOptions())
    model = StageModel(inp.gg, inp.cluster, inp.cost, "adam", inp.batch_size, [0, 1, 2, 3])
    params = sum(g.param_bytes for g in inp.gg.groups)
    whole = 2 * 3 / 4 * params / (20e9 / 8 / 1e3)
    assert sync_caps(model, 3) == pytest.approx([math.inf, whole / 4, whole / 16, whole / 64])
