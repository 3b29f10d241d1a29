"""Shared parameters, unbatched tensors and uneven row maps."""

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.graph.opgraph import TensorInfo
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig

BPMS = 80e9 / 8 / 1e3  # intra link, bytes per ms
LAT = 2e-3


def test_shared_param_synced_over_union_of_devices():
    # g0 on dev0 -> g1 on dev1, both use parameter w (4e6 B, counted in g0). Forward: g0 0-4, transfer of
    # 8 x 1e3 B, g1 4.0028-8.0028; backward g1 -> 16.0028, gradient back -> 16.0056, g0 bwd -> 24.0056.
    # w is synced over {dev0, dev1} once both backwards are done: ring of 2 = S / B + 2 alpha.
    S = 4e6
    gg = make_gg([dict(param_bytes=S, param_count=1_000_000), dict()], [(0, 1, 1e3, 0.0)])
    gg.graph.tensors["w"] = TensorInfo("w", "float32", (1000, 1000), role="param")
    gg.shared_params = {"w": [0, 1]}
    st = Strategy((Decision((8, 0), "allreduce"), Decision((0, 8))))
    r = simulate(gg, make_cluster([2]), FixedCost([0.5, 0.5], [0.1, 0.0]), st, TrainingConfig())
    xfer = 8e3 / BPMS + LAT
    assert r.iteration_ms == pytest.approx(4 + xfer + 4 + 8 + xfer + 8 + S / BPMS + 2 * LAT + 0.1)
    # dev1 holds w, its gradient and Adam states although its group owns no parameters
    assert r.peak_memory_gb["m0/1"] >= 4 * S / 1e9
    # without sharing no sync happens
    gg.shared_params = {}
    r2 = simulate(gg, make_cluster([2]), FixedCost([0.5, 0.5], [0.1, 0.0]), st, TrainingConfig())
    assert r2.iteration_ms == pytest.approx(4 + xfer + 4 + 8 + xfer + 8 + 0.1)


def test_uneven_row_maps_move_exactly_the_slices():
    # producer rows (6, 2), consumer (2, 6): dev0 sends rows 2..6 (4 rows) to dev1; nothing moves back
    # the other way in forward. Bytes per row 100 -> 400 B on dev0's port up, and back in backward.
    gg = make_gg([dict(), dict()], [(0, 1, 100.0, 0.0)])
    st = Strategy((Decision((6, 2)), Decision((2, 6))))
    r = simulate(gg, make_cluster([2]), FixedCost([0.0, 0.0]), st, TrainingConfig())
    assert r.link_bytes == pytest.approx({"m0/0->m0": 400.0, "m0->m0/1": 400.0, "m0/1->m0": 400.0, "m0->m0/0": 400.0})


def test_unbatched_tensor_sent_whole_to_each_consumer_lacking_it():
    # g0 on dev0 makes a 1000-B unbatched tensor used by g1 replicated on dev0..dev2: dev1 and dev2 get it
    gg = make_gg([dict(), dict()], [(0, 1, 0.0, 1000.0)])
    st = Strategy((Decision((6, 0, 0)), Decision((2, 2, 2))))
    r = simulate(gg, make_cluster([3]), FixedCost([0.0, 0.0]), st, TrainingConfig())
    assert r.link_bytes["m0/0->m0"] == pytest.approx(2000.0)
    assert r.link_bytes["m0->m0/1"] == pytest.approx(1000.0) and r.link_bytes["m0->m0/2"] == pytest.approx(1000.0)
    # both copies share dev0's port: each runs at half rate; then gradients come back the same way
    assert r.iteration_ms == pytest.approx(2 * (2000.0 / BPMS + LAT))


def test_bad_strategy_shape_is_rejected():
    gg = make_gg([dict()], [])
    with pytest.raises(ValueError):
        simulate(gg, make_cluster([2]), FixedCost([1.0]), Strategy((Decision((4,)),)), TrainingConfig())
