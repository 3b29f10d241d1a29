"""`tag profile links`' collective constants: the per-step latency fitted from the all-reduce sweep (by hand), and
that a measured topology and a profile carry it into the simulator's collectives."""

import json

import pytest

from tag.profile.links import collective_hop_gbps, collective_step_us

# 4 ranks: a ring all-reduce of S moves 2 x 3/4 x S = 1.5 S per hop in 2 x 3 = 6 steps. Hop rate 8 Gbit/s = 1e6 B/ms.
# Sizes >= 1 MiB follow 6 x 50 us + 1.5 S / 1e6 exactly; two small sizes take 1.2 ms and 1.8 ms.
SIZES = [8, 4096, 2 ** 20, 2 ** 22]
TIMES = [1.2, 1.8, 0.3 + 1.5 * 2 ** 20 / 1e6, 0.3 + 1.5 * 2 ** 22 / 1e6]


def _measured(ranks=4, sizes=SIZES, times=TIMES):
    return {"x-measured": {"sizes_bytes": sizes, "allreduce_ms": times,
                           "fits": {"allreduce": {"ranks": ranks, "hop_latency_us": 77.0, "hop_bandwidth_gbps": 3.0}}}}


def test_step_latency_from_the_small_sizes_by_hand():
    """Rate from the sizes >= 1 MiB: 8 Gbit/s. Steps: (1.2 - 1.5 x 8 / 1e6) / 6 = 0.199998 ms and
    (1.8 - 1.5 x 4096 / 1e6) / 6 = 0.298976 ms; the median of the two, 249.487 us."""
    t = _measured()
    assert collective_hop_gbps(t) == pytest.approx(8.0, rel=1e-9)
    assert collective_step_us(t) == pytest.approx((199.998 + 298.976) / 2, rel=1e-9)


def test_step_latency_without_small_sizes_or_measurement():
    assert collective_step_us(_measured(sizes=SIZES[2:], times=TIMES[2:])) == 77.0  # the whole-sweep fit's
    assert collective_step_us({"version": 1}) is None
    too_fast = _measured(times=[0.0, 0.0] + TIMES[2:])  # faster than the bytes allow: clamped at 0
    assert collective_step_us(too_fast) == 0.0


def test_measured_step_latency_reaches_the_simulators_collectives(tmp_path):
    """A 2-rank measured topology (route latency 2 x 45 = 90 us) with a fitted step of 249.487 us and a profile:
    `load_inputs` gives a cost model whose collectives take max(90, 249.487) us per step; a 2-rank ring of S
    bytes at the measured 8 Gbit/s then takes S / 1e6 + 2 x 0.249487 ms (2(n-1)/n = 1, 2 steps)."""
    from tag.cost.profile_db import ProfileDB, save
    from tag.modelio import ModelOptions, load_inputs
    from tag.sim.context import sim_context

    topo = {"version": 1, "name": "two", "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 2}],
                                                       "intra_bandwidth_gbps": 20.0, "intra_latency_us": 90.0}]}
    topo.update(_measured(ranks=2, times=[1.2, 1.8, 0.3 + 2 ** 20 / 1e6, 0.3 + 2 ** 22 / 1e6]))
    topo_path, prof_path = tmp_path / "t.json", tmp_path / "p.json"
    topo_path.write_text(json.dumps(topo))
    save(ProfileDB("cpu", 1, {}, {}), str(prof_path))
    inp = load_inputs("datasets/models/mlp.onnx", str(topo_path), ModelOptions(batch_size=8, profile=str(prof_path)))
    # 2 ranks, 2 steps: (1.2 - 8 / 1e6) / 2 and (1.8 - 4096 / 1e6) / 2 ms
    want_us = ((1.2 - 8e-6) / 2 + (1.8 - 4096e-6) / 2) / 2 * 1e3
    ctx = sim_context(inp.gg, inp.cluster, inp.cost, inp.training)
    assert ctx.step_us((0, 1)) == pytest.approx(want_us, rel=1e-9)
    (phase,) = ctx.phases("ring", (0, 1), 1e6, None)
    (flow,) = phase
    assert flow.latency_ms == pytest.approx(2 * want_us / 1e3, rel=1e-9)
    without = load_inputs("datasets/models/mlp.onnx", str(topo_path), ModelOptions(batch_size=8))
    assert sim_context(without.gg, without.cluster, without.cost, without.training).step_us((0, 1)) is None
