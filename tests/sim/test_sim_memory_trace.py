"""Memory accounting (OOM) and the Chrome trace."""

import json
import math

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim import simulate, write_chrome_trace
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.topology.cluster import DeviceType

SMALL = DeviceType("Small1GB", peak_tflops=10.0, memory_gb=1.0, memory_bandwidth_gbps=8000.0)  # usable 0.92e9


def _wide_pair():
    # two wide layers of 3e7 fp32 params (1.2e8 bytes each); Adam: weights + 2 moments + gradient = 4.8e8
    P = 30_000_000
    return make_gg([dict(param_bytes=4 * P, param_count=P, saved_bytes_per_row=1000.0),
                    dict(param_bytes=4 * P, param_count=P, saved_bytes_per_row=1000.0)],
                   [(0, 1, 100.0, 0.0)])


def test_wide_layers_oom_on_one_device_fit_on_two():
    gg = _wide_pair()
    cl = make_cluster([2], dtype=SMALL)
    cost = FixedCost([0.1, 0.1], [0.2, 0.2])
    one = simulate(gg, cl, cost, Strategy((Decision((8, 0)), Decision((8, 0)))), TrainingConfig("adam"))
    # static 2 x (1.2e8 + 2.4e8); Adam's step (foreach on a GPU) holds both gradients (2.4e8) and sqrt(v) of both
    # weights (2.4e8), more than the start of bwd g0 (both gradients and g0's saved 8000 B)
    assert one.peak_memory_gb["m0/0"] == pytest.approx((7.2e8 + 2.4e8 + 2.4e8) / 1e9)
    assert one.oom and one.oom_devices == ["m0/0"]
    assert one.iteration_ms == math.inf and one.samples_per_s == 0.0
    assert one.fit_iteration_ms > 0 and one.to_json()["iteration_ms"] is None
    two = simulate(gg, cl, cost, Strategy((Decision((8, 0)), Decision((0, 8)))), TrainingConfig("adam"))
    # per device: 3.6e8 static + the step's 1.2e8 gradient and 1.2e8 sqrt(v) (the backward: 1.2e8 gradient +
    # 8000 saved + 800 B of received slice (8 rows x 100 B), less)
    assert two.peak_memory_gb["m0/0"] == pytest.approx((3.6e8 + 2.4e8) / 1e9)
    assert two.peak_memory_gb["m0/1"] == pytest.approx((3.6e8 + 2.4e8) / 1e9)
    assert not two.oom and math.isfinite(two.iteration_ms)


def test_optimizer_state_changes_memory():
    gg = _wide_pair()
    cl = make_cluster([1], dtype=SMALL)
    st = Strategy((Decision((8,)), Decision((8,))))
    sgd = simulate(gg, cl, FixedCost([0.1, 0.1]), st, TrainingConfig("sgd"))
    mom = simulate(gg, cl, FixedCost([0.1, 0.1]), st, TrainingConfig("momentum"))
    # sgd: weights 2.4e8 + gradients 2.4e8; momentum adds one fp32 buffer (2.4e8)
    assert sgd.peak_memory_gb["m0/0"] == pytest.approx((4.8e8 + 8000) / 1e9)
    assert mom.peak_memory_gb["m0/0"] == pytest.approx((7.2e8 + 8000) / 1e9)
    assert not sgd.oom and not mom.oom


def test_activations_freed_by_backward():
    # saved activations accumulate over the forward and peak at the start of backward (no params)
    gg = make_gg([dict(saved_bytes_per_row=10.0, out_bytes_per_row=1.0), dict(saved_bytes_per_row=20.0),
                  dict(saved_bytes_per_row=30.0, out_bytes_per_row=5.0)], [(0, 1, 1.0, 0.0), (1, 2, 1.0, 0.0)])
    r = simulate(gg, make_cluster([1]), FixedCost([0.1] * 3), Strategy((Decision((10,)),) * 3), TrainingConfig())
    # live after forward = 600 B; during bwd of g2 its output gradient (50 B) and the gradient of its input from
    # g1 (10 rows x 1 B) are transient -> 660
    assert r.peak_memory_gb["m0/0"] == pytest.approx(660 / 1e9)


def test_chrome_trace_is_valid_json_with_lanes(tmp_path):
    gg = make_gg([dict(param_bytes=4e6, param_count=1_000_000), dict()], [(0, 1, 1e5, 0.0)])
    cl = make_cluster([2, 1])
    st = Strategy((Decision((4, 4, 0), "allreduce"), Decision((0, 0, 8))))
    r = simulate(gg, cl, FixedCost([1.0, 1.0], [0.1, 0.0]), st, TrainingConfig(), trace=True)
    path = tmp_path / "t.json"
    write_chrome_trace(r, str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in xs:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["dur"] >= 0 and (e["pid"], e["tid"]) in names
    compute = [e for e in xs if e["pid"] == 0]
    # 2 fwd + 2 bwd + 2 updates of g0, 1 fwd + 1 bwd of g1
    assert len(compute) == 8
    assert any("op0" in e["name"] and e["name"].startswith("fwd g0") for e in compute)
    assert names[(0, 2)] == "m1/0"
    net_lanes = {names[(1, e["tid"])] for e in xs if e["pid"] == 1}
    assert "m0->sw" in net_lanes and "sw->m0" in net_lanes  # activation slices out, gradients back in
    assert max(e["ts"] + e["dur"] for e in xs) / 1e3 == pytest.approx(r.iteration_ms)


def _program_walk_peak(groups_in_order, rows, optimizer, recv_fwd, recv_bwd, bucketed):
    """Peak bytes on one device computing rows[k] rows of groups_in_order[k] of a hand-built graph, walking its
    program: weights and states (plus the bucket's gradient when bucketed) for good; each forward adds its saved
    bytes and received activations (its output as a temporary); each backward, in reverse, its gradient (unless
    bucketed), its output gradient and the gradients received, then frees what its forward saved."""
    from tag.cost.optimizer import state_bytes_per_param

    static = sum(g.param_bytes + g.param_count * state_bytes_per_param(optimizer) + (g.param_bytes if b else 0.0)
                 for g, b in zip(groups_in_order, bucketed))
    live = peak = 0.0
    for g, r, rf in zip(groups_in_order, rows, recv_fwd):
        live += g.saved_bytes_per_row * r + g.saved_bytes_fixed + rf
        peak = max(peak, live + g.out_bytes_per_row * r)
    for k in range(len(groups_in_order) - 1, -1, -1):
        g, r = groups_in_order[k], rows[k]
        live += 0.0 if bucketed[k] else g.param_bytes
        peak = max(peak, live + g.out_bytes_per_row * r + recv_bwd[k])
        live -= g.saved_bytes_per_row * r + g.saved_bytes_fixed + recv_fwd[k]
    return static + peak


def test_vectorised_peak_equals_program_walk():
    """peak_memory_bytes (numpy, all devices) against `_program_walk_peak` (walks one device's program), with
    momentum (no optimizer-step temporaries, which the walk leaves out; tests/sim/test_memory_decisions.py
    walks Adam's step)."""
    import random

    import numpy as np

    from tag.sim.context import SimContext
    from tag.sim.memory import peak_memory_bytes

    rng = random.Random(3)
    for _ in range(20):
        k, n = rng.randint(1, 6), rng.randint(1, 4)
        gg = make_gg([dict(param_bytes=4.0 * p, param_count=p, saved_bytes_per_row=rng.choice([0.0, 10.0, 50.0]),
                           saved_bytes_fixed=rng.choice([0.0, 7.0]), out_bytes_per_row=rng.choice([0.0, 3.0]))
                      for p in (rng.choice([0, 100, 1000]) for _ in range(k))], [])
        decs = [Decision(tuple(rng.choice([0, 0, 2, 5]) for _ in range(n))) for _ in range(k)]
        recv = [(rng.randrange(k), rng.randrange(n), rng.randrange(k), rng.randrange(n), float(rng.randint(1, 99)))
                for _ in range(rng.randint(0, 5))]
        recv = [r for r in recv if decs[r[0]].rows[r[1]] > 0 and decs[r[2]].rows[r[3]] > 0]
        ctx = SimContext(gg, make_cluster([n]), FixedCost([0.0] * k), TrainingConfig("momentum"))
        got = peak_memory_bytes(ctx, decs, recv, "momentum", np.zeros(n))
        for d in range(n):
            gl = [g for g in range(k) if decs[g].rows[d] > 0]
            rf = [sum(r[4] for r in recv if (r[0], r[1]) == (g, d)) for g in gl]
            rb = [sum(r[4] for r in recv if (r[2], r[3]) == (g, d)) for g in gl]
            multi = [sum(1 for r in decs[g].rows if r) > 1 for g in gl]  # replicated: gradients in a bucket
            want = _program_walk_peak([gg.groups[g] for g in gl], [decs[g].rows[d] for g in gl], "momentum", rf, rb,
                                     bucketed=multi)
            assert got[d] == pytest.approx(want)
