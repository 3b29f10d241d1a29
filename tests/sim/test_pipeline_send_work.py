"""Send work in pipelined task graphs: a CPU rank on loopback writes each message on its own thread, so its stream
is busy for the message's route time after the pass that sends it (`tag.sim.pipeline_build`, "Send work").

The chain: group 0 on device 0 (stage 0) -> group 1 on device 1 (stage 1), global batch 2 in m = 2 micro-batches
of 1 row, GPipe; FixedCost: every forward 1 ms, every backward 2 ms, no update. Both devices on one machine; each
device <-> machine link 80 Gbit/s = 1e7 bytes/ms with 250 us latency, so the route 0 -> 1 (two links) drains
1e7 bytes in 1 ms and adds 0.5 ms: a 1e7-byte message (1 row) takes 1.5 ms on the link, and the sender's send
work is its bytes at the route's bandwidth, 1e7 / 1e7 = 1 ms.
"""

import dataclasses

import numpy as np
import pytest

from simkit_builders import GPU, FixedCost, make_cluster, make_gg
from tag.sim import simulate
from tag.sim.context import sim_context
from tag.sim.pipeline_build import send_ms
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.pipeline import Pipeline, Stage
from tag.topology.cluster import DeviceType

TC = TrainingConfig(optimizer="adam")
CPU = DeviceType("TestCPU", peak_tflops=0.1, memory_gb=16.0, memory_bandwidth_gbps=800.0, kind="cpu")
BYTES_PER_ROW = 1e7


def _run(machines, dtype):
    cl = make_cluster(machines, dev_lat_us=250.0, dtype=dtype)
    gg = make_gg([dict(param_bytes=40, param_count=10), dict(param_bytes=40, param_count=10)],
                 [(0, 1, BYTES_PER_ROW, 0.0)])
    pl = Pipeline((Stage((0,), (0,)), Stage((1,), (1,))), 2, "gpipe")
    st = Strategy((Decision((2, 0)), Decision((0, 2))), pipeline=pl)
    traced = simulate(gg, cl, FixedCost([1.0, 1.0], [0.0, 0.0]), st, TC, trace=True)
    fused = simulate(gg, cl, FixedCost([1.0, 1.0], [0.0, 0.0]), st, TC)
    assert fused.iteration_ms == pytest.approx(traced.iteration_ms)
    return traced


def _spans(result, device):
    """[(category, start ms, end ms)] of the device's compute tasks in start order."""
    ev = sorted((e for e in result.trace_events if e["ph"] == "X" and e["pid"] == 0 and e["tid"] == device),
                key=lambda e: e["ts"])
    return [(e["cat"], round(e["ts"] / 1e3, 6), round((e["ts"] + e["dur"]) / 1e3, 6)) for e in ev]


def test_cpu_ranks_on_one_machine_pay_send_work_after_each_sending_pass():
    # dev0: F0 0-1, send 1-2, F1 2-3, send 3-4. Activations leave when F0 / F1 end (1, 3) and arrive 1.5 ms
    # later: 2.5, 4.5. dev1: F0 2.5-3.5, F1 4.5-5.5, B0 5.5-7.5, send 7.5-8.5, B1 8.5-10.5, send 10.5-11.5.
    # Gradients leave at 7.5 and 10.5, arrive 9 and 12. dev0 (no sends in the backward: group 0 has no
    # producer): B0 9-11, B1 12-14. Iteration 14 ms (the zero-length updates at each stream's end).
    r = _run([2], CPU)
    assert _spans(r, 0) == ([("fwd", 0, 1), ("fwd", 1, 2), ("fwd", 2, 3), ("fwd", 3, 4),
                             ("bwd", 9, 11), ("bwd", 12, 14), ("update", 14, 14)])
    assert _spans(r, 1) == ([("fwd", 2.5, 3.5), ("fwd", 4.5, 5.5), ("bwd", 5.5, 7.5), ("bwd", 7.5, 8.5),
                             ("bwd", 8.5, 10.5), ("bwd", 10.5, 11.5), ("update", 11.5, 11.5)])
    assert r.iteration_ms == pytest.approx(14.0)
    # busy: 2 x 1 + 2 x 2 + 2 x 1 on each device
    assert r.busy_ms["m0/0"] == pytest.approx(8.0) and r.busy_ms["m0/1"] == pytest.approx(8.0)


def test_gpus_pay_no_send_work():
    # dev0 F0 0-1, F1 1-2; arrivals 2.5, 3.5; dev1 F0 2.5-3.5, F1 3.5-4.5, B0 4.5-6.5, B1 6.5-8.5; gradients
    # arrive 8, 10; dev0 B0 8-10, B1 10-12.
    r = _run([2], GPU)
    assert r.iteration_ms == pytest.approx(12.0)
    assert r.busy_ms["m0/0"] == pytest.approx(6.0)


def test_cpu_ranks_on_two_machines_pay_no_send_work():
    r = _run([1, 1], CPU)
    busy = r.busy_ms
    assert busy["m0/0"] == pytest.approx(6.0) and busy["m1/0"] == pytest.approx(6.0)


def test_send_ms_is_bytes_over_the_route_bandwidth():
    # 2e7 bytes at 1e7 bytes/ms; neither the route's 0.5 ms latency nor a wake-up latency added to the pair
    # matrix (`tag.cost.contention.with_handoff`) is send work
    cl = make_cluster([2], dev_lat_us=250.0, dtype=CPU)
    gg = make_gg([dict(param_bytes=40, param_count=10)], [])
    ctx = sim_context(gg, cl, FixedCost([1.0], [0.0]), TC)
    assert send_ms(ctx, 0, 1, 2e7) == pytest.approx(2.0)
    lat = np.array(cl.latency_us, copy=True) + 1e3
    ctx2 = sim_context(gg, dataclasses.replace(cl, latency_us=lat), FixedCost([1.0], [0.0]), TC)
    assert send_ms(ctx2, 0, 1, 2e7) == pytest.approx(2.0)
    assert send_ms(ctx, 0, 0, 2e7) == 0.0
