"""ZeRO's time model (tag.sim.zero) against timelines worked out by hand.

Two devices of one machine (make_cluster([2])): every device link 80 Gbit/s = 1e7 bytes/ms, 1 us, so a route
between the two devices has latency 2 us = 0.002 ms. A ring over n = 2 devices crosses each directed device link
once: a reduce-scatter or an all-gather of S bytes moves (n-1)/n x S = S/2 per hop in n - 1 = 1 step,
S/2 / 1e7 + 0.002 ms; the all-reduce moves 2 x S/2 in 2 steps. FixedCost: forward f[g] x rows ms, backward twice
that, update upd[g] ms per device. Two groups, both on both devices (4 rows each), so no activation moves:
group 0 (f = 1) forward 4 ms, backward 8; group 1 (f = 2) forward 8, backward 16; program F0 F1 B1 B0 step.
"""

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim import simulate
from tag.sim.algorithms import algorithm_ms
from tag.sim.buckets import check_buckets, derive_buckets
from tag.strategy import Bucket, Decision, Strategy, TrainingConfig
from tag.strategy.pipeline import Pipeline, Stage

TC = TrainingConfig(optimizer="adam")
BPMS = 1e7  # bytes per ms of a device link
LAT = 0.002  # ms, one step between the two devices
S0, S1 = 2e6, 4e6  # parameter bytes of groups 0 and 1
UPD = [0.2, 0.4]


def half(nbytes):
    """One ring reduce-scatter or all-gather of `nbytes` over the 2 devices, ms."""
    return nbytes / 2 / BPMS + LAT


def _run(zero, upd=UPD, f=(1.0, 2.0)):
    cl = make_cluster([2])
    gg = make_gg([dict(param_bytes=S0, param_count=int(S0 / 4)), dict(param_bytes=S1, param_count=int(S1 / 4))],
                 [(0, 1, 0.0, 0.0)])
    st = Strategy(tuple(Decision((4, 4), "ring", zero=zero) for _ in range(2)))
    traced = simulate(gg, cl, FixedCost(list(f), list(upd)), st, TC, trace=True)
    fused = simulate(gg, cl, FixedCost(list(f), list(upd)), st, TC)
    assert fused.iteration_ms == traced.iteration_ms  # chain fusion stays exact with the new collectives
    return traced


def _flows(r):
    """{label: (start ms, drain ms)} of the flows on link m0/0->m0."""
    lane = next(e["tid"] for e in r.trace_events if e["ph"] == "M" and e["args"].get("name") == "m0/0->m0")
    return {e["name"]: (e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3)
            for e in r.trace_events if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == lane}


def test_zero0_is_the_all_reduce_as_before():
    # backward of group 0 ends at 36; its all-reduce (2 x S0/2 / 1e7 + 2 steps) is the last; step 0.6
    r = _run(0)
    assert r.iteration_ms == pytest.approx(36 + 2 * S0 / 2 / BPMS + 2 * LAT + 0.6)


@pytest.mark.parametrize("zero", [1, 2])
def test_zero1_and_2_are_reduce_scatter_update_share_and_all_gather(zero):
    # B1 ends at 28: reduce-scatter g1 28 -> 28.202 while B0 computes; B0 ends at 36: reduce-scatter g0
    # 36 -> 36.102; each replica updates half of everything: (0.2 + 0.4) / 2 = 0.3 -> 36.402; then the
    # all-gathers of the updated weights queue on the one communicator: 0.102 + 0.202 -> 36.706.
    r = _run(zero)
    expected = 36 + half(S0) + sum(UPD) / 2 + half(S0) + half(S1)
    assert expected == pytest.approx(36.706)
    assert r.iteration_ms == pytest.approx(expected)
    flows = _flows(r)
    assert flows["reduce-scatter g1"] == pytest.approx((28.0, 28.2))
    assert flows["reduce-scatter g0"] == pytest.approx((36.0, 36.1))
    assert {k for k in flows} == {"reduce-scatter g0", "reduce-scatter g1", "gather w g0 updated",
                                  "gather w g1 updated"}
    # one all-reduce's volume: S per direction of each device link
    assert r.link_bytes["m0/0->m0"] == pytest.approx(S0 + S1)
    waits = [e for e in r.trace_events if e["ph"] == "X" and e["name"] == "wait gathers"]
    assert len(waits) == 2 and waits[0]["ts"] / 1e3 == pytest.approx(expected)


def test_zero3_gathers_are_prefetched_behind_compute():
    # At 0 the forward gathers of g0 and g1 are issued (nothing before them): g0's 0 -> 0.102, then g1's
    # 0.102 -> 0.204 (one communicator). F0 0.102 -> 4.102, F1 4.102 -> 12.102 (its gather long done).
    # g1's backward gather is issued when F1 starts (after F0): 4.102 -> 4.204; g0's when B1 starts: 12.102 ->
    # 12.204. B1 12.102 -> 28.102, reduce-scatter g1 28.102 -> 28.304; B0 28.102 -> 36.102, reduce-scatter g0
    # 36.102 -> 36.204, step 0.3 -> 36.504. No all-gather after the step.
    r = _run(3)
    expected = half(S0) + 36 + half(S0) + sum(UPD) / 2
    assert expected == pytest.approx(36.504)
    assert r.iteration_ms == pytest.approx(expected)
    flows = _flows(r)
    assert flows["gather w g0 fwd"] == pytest.approx((0.0, 0.1))
    assert flows["gather w g1 fwd"] == pytest.approx((0.102, 0.302))
    assert flows["gather w g1 bwd"] == pytest.approx((4.102, 4.302))
    assert flows["gather w g0 bwd"] == pytest.approx((12.102, 12.202))
    assert flows["reduce-scatter g0"] == pytest.approx((36.102, 36.202))
    # 1.5 all-reduces: two gathers and a reduce-scatter of S/2 per hop each
    assert r.link_bytes["m0/0->m0"] == pytest.approx(1.5 * (S0 + S1))


def test_zero3_gathers_on_the_critical_path_when_compute_is_short():
    # f = 1e-3 ms per row: F0 0.004, F1 0.008, B1 0.016, B0 0.008 ms. The collectives queue on the one
    # communicator in the order they are issued. At 0: gather g0 fwd 0 -> 0.102, then gather g1 fwd
    # 0.102 -> 0.304. F0 0.102 -> 0.106 issues gather g1 bwd (queued); F1 0.304 -> 0.312 issues gather g0 bwd.
    # gather g1 bwd 0.304 -> 0.506, gather g0 bwd 0.506 -> 0.608. B1 0.506 -> 0.522 makes reduce-scatter g1
    # ready (queued); B0 0.608 -> 0.616. reduce-scatter g1 0.608 -> 0.810, reduce-scatter g0 0.810 -> 0.912;
    # step 0.3 -> 1.212: every collective back to back, then the step.
    r = _run(3, f=(1e-3, 2e-3))
    expected = 3 * half(S0) + 3 * half(S1) + sum(UPD) / 2
    assert expected == pytest.approx(1.212)
    assert r.iteration_ms == pytest.approx(expected)


def test_zero_buckets_hold_one_stage_and_zero3_groups_alone():
    gg = make_gg([dict(param_bytes=1e6, param_count=1) for _ in range(4)], [])
    decs = [Decision((1, 1), "ring", zero=z) for z in (0, 2, 3, 3)]
    # reverse order 3, 2, 1, 0: the zero-3 groups stay alone, then the zero-2 group, then the zero-0 group
    assert [b.groups for b in derive_buckets(gg, decs, 25.0, None)] == [(3,), (2,), (1,), (0,)]
    same = [Decision((1, 1), "ring", zero=2) for _ in range(4)]
    assert [b.groups for b in derive_buckets(gg, same, 25.0, None)] == [(3, 2, 1, 0)]
    st = Strategy(tuple(decs), 25.0)
    why = check_buckets(gg, st, (Bucket((3, 2), "ring"), Bucket((1, 0), "ring")))
    assert why is not None and "ZeRO stage" in why and why.startswith("buckets[1].groups: group 0")


def test_ring_halves_add_up_to_the_all_reduce_and_match_the_formula():
    cl = make_cluster([4])
    devs, S = (0, 1, 2, 3), 8e6
    rs = algorithm_ms("reducescatter", cl, devs, S)
    ag = algorithm_ms("allgather", cl, devs, S)
    # ring over 4 devices of one machine: every device link carries one hop each way; 3 steps of 2 us
    assert rs == pytest.approx(3 / 4 * S / BPMS + 3 * LAT)
    assert ag == pytest.approx(rs)
    assert rs + ag == pytest.approx(algorithm_ms("ring", cl, devs, S))


def test_hierarchical_halves_by_hand():
    # 2 machines x 2 devices, intra 1e7 B/ms, NIC 8 Gbit/s = 1e6 B/ms, latency 2 us inside, 10 us across.
    # reduce-scatter: (1) inside each machine, a ring reduce-scatter of S: S/2 per hop, 1 step of 2 us;
    # (2) each of the 2 shards S/2 reduce-scattered over the 2 machines: (K-1)/K x S/2 = S/4 per hop, the 2 rings
    # share each NIC direction (weight 2): 2 x S/4 / 1e6, 1 step of 10 us. The all-gather mirrors it. On GPUs
    # phase (1) adds NCCL's extra call latency, 8.4 us (tag.cost.nccl).
    cl = make_cluster([2, 2])
    devs, S = (0, 1, 2, 3), 4e6
    hand = S / 2 / BPMS + LAT + 0.0084 + 2 * S / 4 / 1e6 + 0.010
    rs = algorithm_ms("hierarchical-reducescatter", cl, devs, S)
    ag = algorithm_ms("hierarchical-allgather", cl, devs, S)
    assert rs == pytest.approx(hand) and ag == pytest.approx(hand)
    assert rs + ag == pytest.approx(algorithm_ms("hierarchical", cl, devs, S))


def test_zero_on_a_hierarchical_bucket_uses_its_halves():
    cl = make_cluster([2, 2])
    S = 4e6
    gg = make_gg([dict(param_bytes=S, param_count=int(S / 4))], [])
    cost = FixedCost([1.0], [0.4])
    devs = (0, 1, 2, 3)
    r0 = simulate(gg, cl, cost, Strategy((Decision((2, 2, 2, 2), "hierarchical"),)), TC)
    r1 = simulate(gg, cl, cost, Strategy((Decision((2, 2, 2, 2), "hierarchical", zero=1),)), TC)
    # compute 2 + 4 ms; zero 0: all-reduce + step; zero 1: reduce-scatter + step / 4 + all-gather
    assert r0.iteration_ms == pytest.approx(6 + algorithm_ms("hierarchical", cl, devs, S) + 0.4)
    rs = algorithm_ms("hierarchical-reducescatter", cl, devs, S)
    ag = algorithm_ms("hierarchical-allgather", cl, devs, S)
    assert r1.iteration_ms == pytest.approx(6 + rs + 0.1 + ag)


def test_pipelined_zero3_gathers_once_per_step():
    # one stage of both devices, m = 2 micro-batches of 2 rows each (f = 1: forward 2 ms, backward 4 ms per
    # micro-batch), GPipe: F0 F1 B0 B1. The gather (S0/2 per hop) before F(mb0) only: 0 -> 0.102;
    # compute 0.102 -> 12.102; one reduce-scatter after the last backward -> 12.204; step 0.2 / 2.
    cl = make_cluster([2])
    gg = make_gg([dict(param_bytes=S0, param_count=int(S0 / 4))], [])
    pl = Pipeline((Stage((0,), (0, 1)),), 2, "gpipe")
    st = Strategy((Decision((4, 4), "ring", zero=3),), pipeline=pl)
    r = simulate(gg, cl, FixedCost([1.0], [0.2]), st, TC, trace=True)
    assert r.iteration_ms == pytest.approx(half(S0) + 12 + half(S0) + 0.1)
    assert r.link_bytes["m0/0->m0"] == pytest.approx(S0)  # one gather, one reduce-scatter
    assert r.iteration_ms == simulate(gg, cl, FixedCost([1.0], [0.2]), st, TC).iteration_ms


def test_pipelined_zero1_reduce_scatters_after_the_last_micro_batch():
    cl = make_cluster([2])
    gg = make_gg([dict(param_bytes=S0, param_count=int(S0 / 4))], [])
    pl = Pipeline((Stage((0,), (0, 1)),), 2, "gpipe")
    st = Strategy((Decision((4, 4), "ring", zero=1),), pipeline=pl)
    r = simulate(gg, cl, FixedCost([1.0], [0.2]), st, TC)
    assert r.iteration_ms == pytest.approx(12 + half(S0) + 0.1 + half(S0))


class _FillCost(FixedCost):
    """FixedCost with ZeRO's fresh buffers at 1 ms per 1e6 bytes (a CPU profile's ``fill_ms``)."""

    def fresh_fill_ms(self, device, nbytes):
        return nbytes / 1e6


def _run_fill(zero):
    cl = make_cluster([2])
    gg = make_gg([dict(param_bytes=S0, param_count=int(S0 / 4)), dict(param_bytes=S1, param_count=int(S1 / 4))],
                 [(0, 1, 0.0, 0.0)])
    st = Strategy(tuple(Decision((4, 4), "ring", zero=zero) for _ in range(2)))
    return simulate(gg, cl, _FillCost([1.0, 2.0], list(UPD)), st, TC)


def test_fresh_buffers_stage1_lengthen_each_replicas_step():
    # as test_zero1_and_2...: 36.706, plus each replica's master gradients fill(S0 / 2) + fill(S1 / 2) = 1 + 2 ms
    # before its (half) update; the update itself is still halved (0.3)
    assert _run_fill(1).iteration_ms == pytest.approx(36 + half(S0) + sum(UPD) / 2 + 3.0 + half(S0) + half(S1))
    assert _run_fill(0).iteration_ms == pytest.approx(_run(0).iteration_ms)  # no ZeRO, no fill


def test_fresh_buffers_stage2_lengthen_the_backward():
    # B1 12 -> 12 + 16 + fill(S1) 4 = 32, reduce-scatter g1 32 -> 32.202; B0 32 -> 32 + 8 + fill(S0) 2 = 42,
    # reduce-scatter g0 42 -> 42.102; step 0.3 -> 42.402; the gathers 0.102 + 0.202 -> 42.706
    assert _run_fill(2).iteration_ms == pytest.approx(42 + half(S0) + sum(UPD) / 2 + half(S0) + half(S1))


def test_fresh_buffers_stage3_in_forward_and_twice_in_backward():
    # gathers g0 fwd 0 -> 0.102, g1 fwd 0.102 -> 0.304. F0 0.102 -> 0.102 + 4 + 2 = 6.102, F1 -> 6.102 + 8 + 4 =
    # 18.102; B1 -> 18.102 + 16 + 2 x 4 = 42.102 (its gather 6.102 -> 6.304 long done), B0 -> 42.102 + 8 + 2 x 2 =
    # 54.102 (gather 18.102 -> 18.204); reduce-scatter g0 54.102 -> 54.204; step 0.3 -> 54.504
    assert _run_fill(3).iteration_ms == pytest.approx(half(S0) + 54 + half(S0) + sum(UPD) / 2)
