"""tag.search.shard_search: grids, sharded decisions and the shares of a grid, worked by hand on mlp.onnx (three
Gemm layers of 512) over a machine that mixes V100s and P100s."""

from types import SimpleNamespace

import pytest

from tag.cost import make_cost_model
from tag.graph import load_model
from tag.graph.coarsen import coarsen
from tag.search.refine import row_shift_neighbours, with_rows_of
from tag.search.shard_search import (apply_grid, grids_over, group_shards, machine_grids, shard_like_neighbour,
                                     shard_parts, sharded_decision)
from tag.strategy import AUTO, Decision, Strategy, TrainingConfig
from tag.strategy.shard import Shard, shard_sizes
from tag.topology.loader import parse_topology

MIXED = {"version": 1, "name": "mixed",
         "machines": [{"name": "a", "devices": [{"type": "V100-16GB", "count": 2}, {"type": "P100-12GB", "count": 2}],
                       "nic_bandwidth_gbps": 10},
                      {"name": "b", "devices": [{"type": "V100-16GB", "count": 2}, {"type": "P100-12GB", "count": 2}],
                       "nic_bandwidth_gbps": 10}]}


@pytest.fixture(scope="module")
def setup():
    graph = load_model("datasets/models/mlp.onnx")
    gg = coarsen(graph, len(graph.ops))  # one op per group
    cluster = parse_topology(MIXED, "mixed.json")
    training = TrainingConfig()
    return gg, cluster, make_cost_model(gg, training), training


def test_group_shards_of_the_mlp(setup):
    gg = setup[0]
    shards = group_shards(gg)
    weights = [g.id for g in gg.groups if g.param_bytes > 0]
    assert sorted(shards) == weights  # each Gemm alone: a column split of its 512 output features
    for g in weights:
        s = shards[g]
        assert (s.split, s.min_units, s.exact_units, s.work_share) == ("column", 512, 0, 1.0)
        assert s.sliced_param_bytes == (512 * 512 + 512) * 4  # weight and bias, fp32


def test_grids_stay_inside_machines(setup):
    cluster = setup[1]
    assert grids_over(cluster, range(8), 4) == {"k4": ((0, 1, 2, 3), (4, 5, 6, 7))}
    # strided pairs put a V100 (0, 1) with a P100 (2, 3) in every replica
    assert grids_over(cluster, range(8), 2) == {"k2": ((0, 1), (2, 3), (4, 5), (6, 7)),
                                                "k2-strided": ((0, 2), (1, 3), (4, 6), (5, 7))}
    assert grids_over(cluster, range(8), 8) == {}  # 8 does not divide a machine of 4
    assert grids_over(cluster, (0, 1, 2), 2) == {}  # 3 devices of machine a
    assert machine_grids(cluster) == {"ma": ((0, 1, 2, 3),), "mb": ((4, 5, 6, 7),)}


def test_sharded_decision_rows_per_replica():
    base = Decision((10, 20, 30, 40), AUTO)
    dec = sharded_decision(base, ((0, 2), (1, 3)), (0.5, 0.5), "column", 100, True)
    assert dec.rows == (40, 60, 40, 60)  # replica (0, 2): 10 + 30 rows on each device; (1, 3): 20 + 40
    assert dec.sync == AUTO and dec.batch_rows == (40, 60, 0, 0)
    one = sharded_decision(base, ((0, 1),), (0.25, 0.75), "column", 100, True)
    assert one.rows == (100, 100, 0, 0) and one.sync is None  # one replica: the whole batch, nothing to sum
    assert sharded_decision(Decision((0, 0, 50, 50)), ((0, 1), (2, 3)), (0.5, 0.5), "row", 100, True) is None


def _peaks(cluster, gb):
    return lambda s: SimpleNamespace(peak_memory_gb={d.id: gb.get(d.id, 1.0) for d in cluster.devices})


def _strided(gg, cluster):
    """(group shards, the first sharded group, data parallelism with 4 rows per device, the strided pairs)."""
    g = group_shards(gg)
    base = Strategy(tuple(Decision((4,) * 8, AUTO if x.param_bytes else None) for x in gg.groups))
    return g, min(g), base, grids_over(cluster, range(8), 2)["k2-strided"]


def test_shares_follow_speed_on_a_mixed_pair(setup):
    gg, cluster, cost, training = setup
    g, first, base, reps = _strided(gg, cluster)
    s = shard_parts(gg, cluster, cost, training, base, [([first], reps)], g, _peaks(cluster, {}))
    # the batch is 32: replica rows 8; the LP balances r_V x t_V = r_P x t_P, t the group's forward + backward
    v, p = cluster.devices[0].type, cluster.devices[2].type
    t_v = cost.group_fwd_ms(first, v, 8) + cost.group_bwd_ms(first, v, 8)
    t_p = cost.group_fwd_ms(first, p, 8) + cost.group_bwd_ms(first, p, 8)
    r_v = t_p / (t_v + t_p)
    assert t_v < t_p
    sizes = shard_sizes(512, (r_v, 1 - r_v))
    assert s.decisions[first].shard == Shard("column", reps, (sizes[0] / 512, sizes[1] / 512))
    assert s.decisions[first].rows == (8,) * 8
    assert all(s.decisions[x] == base.decisions[x] for x in range(gg.n_groups) if x != first)


def test_a_memory_cap_moves_the_share_off_the_fast_device(setup):
    gg, cluster, cost, training = setup
    g, first, base, reps = _strided(gg, cluster)
    sliced = g[first].sliced_param_bytes * 4  # weight, gradient and Adam's two moments
    usable_v = cluster.devices[0].type.usable_memory_bytes
    # the V100s' peak at even shares leaves room for 0.3 of the sliced bytes: whole = usable - 0.3 sliced
    peak_v_gb = (usable_v - 0.3 * sliced + 0.5 * sliced) / 1e9
    peaks = {cluster.devices[d].id: peak_v_gb for d in (0, 1, 4, 5)}
    s = shard_parts(gg, cluster, cost, training, base, [([first], reps)], g, _peaks(cluster, peaks))
    r_v = s.decisions[first].shard.ratios[0]
    assert r_v <= 0.3 + 1e-9 and r_v > 0.29  # the cap binds: 153 of 512 columns (0.2988), the most that fit


def test_parts_share_one_simulation_and_each_gets_its_own_shares(setup):
    """Two parts on the two machines (as a 2-stage pipeline's stages): one simulation at even shares, then each
    part's shares are those its grid gets alone (the one-part LP, worked by hand above)."""
    gg, cluster, cost, training = setup
    g = group_shards(gg)
    w = sorted(g)
    a, b = (0, 1, 2, 3), (4, 5, 6, 7)
    on = lambda devs: Decision(tuple(8 if d in devs else 0 for d in range(8)), AUTO)
    base = Strategy(tuple(on(b) if i >= w[1] else on(a) for i in range(gg.n_groups)))
    pairs = grids_over(cluster, range(8), 2)["k2-strided"]
    parts = [([w[0]], pairs[:2]), ([w[1], w[2]], pairs[2:])]
    calls = []
    peaks = _peaks(cluster, {})
    s = shard_parts(gg, cluster, cost, training, base, parts, g, lambda x: calls.append(x) or peaks(x))
    assert len(calls) == 1  # the even-share strategy only
    assert calls[0].decisions[w[0]].shard.ratios == (0.5, 0.5)
    alone_a = shard_parts(gg, cluster, cost, training, base, [([w[0]], pairs[:2])], g, peaks)
    alone_b = shard_parts(gg, cluster, cost, training, base, parts[1:], g, peaks)
    assert s.decisions[w[0]] == alone_a.decisions[w[0]] and s.decisions[w[0]].shard.ratios[0] > 0.5  # V100 first
    assert s.decisions[w[1]] == alone_b.decisions[w[1]] and s.decisions[w[2]] == alone_b.decisions[w[2]]
    assert s.decisions[w[1]].rows == (0, 0, 0, 0, 16, 16, 16, 16)  # each pair takes the rows its devices had
    assert all(s.decisions[x] == base.decisions[x] for x in range(gg.n_groups) if x not in w)


def test_apply_grid_refuses_replicas_of_an_unsplittable_group(setup):
    gg = setup[0]
    base = Strategy(tuple(Decision((4,) * 8, None) for _ in gg.groups))
    gg.groups[0].splittable = False
    try:
        assert apply_grid(gg, base, [0], ((0, 1), (2, 3), (4, 5), (6, 7)), (0.5, 0.5), group_shards(gg)) is None
    finally:
        gg.groups[0].splittable = True


def test_refinement_moves_around_shards(setup):
    gg = setup[0]
    shards = group_shards(gg)
    sh = Shard("column", ((0, 2), (1, 3)), (0.75, 0.25))
    sharded = Decision((40, 60, 40, 60), AUTO, shard=sh)
    assert row_shift_neighbours(sharded) == []  # rows of a sharded group follow its grid
    assert with_rows_of(sharded, True) == Decision((40, 60, 0, 0), AUTO)
    plain = Decision((25, 25, 25, 25), AUTO)
    w = [g.id for g in gg.groups if g.param_bytes > 0]  # groups 0, 2, 4
    strat = Strategy(tuple(sharded if i == w[0] else plain for i in range(gg.n_groups)))
    # group w[1] (= w[0] + 2) has no sharded neighbour; the Relu between has no parameters: no shard moves
    assert shard_like_neighbour(strat, w[1], shards, True, True) == []
    strat2 = Strategy(tuple(sharded if i in (w[0], w[0] + 1) else plain for i in range(gg.n_groups)))
    moves = shard_like_neighbour(strat2, w[1], shards, True, True)
    assert moves == [Decision((40, 60, 40, 60), AUTO, shard=sh)]
    assert shard_like_neighbour(strat2, w[1], shards, False, True) == []  # two replicas need a splittable group
    # the sharded group itself may drop its shard: its replica rows on their first devices
    assert shard_like_neighbour(strat2, w[0], shards, True, True)[-1] == Decision((40, 60, 0, 0), AUTO)
