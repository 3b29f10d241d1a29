"""The measured cost of one collective call on CPU ranks (`tag.sim.cpu_calls`) and ZeRO-3's blocking gathers there,
against times worked out by hand.

Cluster (`make_cluster([2])`): two devices of one machine, every device link 80 Gbit/s = 1e7 bytes/ms with 1 us, so a
route between the two devices has latency 2 us = 0.002 ms. A ring all-reduce of S over 2 devices moves 2 x S/2 per
hop in 2 steps: S / 1e7 + 2 x 0.002 ms (its reduce-scatter half S/2 / 1e7 + 0.002); deploy's tree on CPU ranks sends S up then S back down, two point-to-point
phases of S / 1e7 + 0.002 ms each; ps pushes S and pulls S: the same two phases.
"""

import pytest

from simkit_builders import GPU, FixedCost, make_cluster, make_gg
from tag.cost.profile_db import from_json, to_json
from tag.errors import InputError
from tag.sim import simulate
from tag.sim.algorithms import algorithm_ms, choose_algorithm
from tag.sim.cpu_calls import with_call_floor
from tag.sim.collectives import FlowSpec
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.topology.cluster import DeviceType

BPMS = 1e7
LAT = 0.002
S = 2e6
CPU = DeviceType("TestCPU", peak_tflops=0.1, memory_gb=16.0, memory_bandwidth_gbps=100.0, kind="cpu")
CALLS = {"allreduce": 0.8, "p2p": 0.5}


def test_floor_adds_the_shortfall_to_the_first_phase_only():
    f = FlowSpec((0,), (1.0,), 10.0, 0.1, 0, 1)
    g = FlowSpec((1,), (1.0,), 10.0, 0.3, 1, 0)
    out = with_call_floor([[f, g], [f]], 1.0)  # latencies 0.3 (largest of phase 0) + 0.1 = 0.4: 0.6 short
    assert [[s.latency_ms for s in ph] for ph in out] == [[pytest.approx(0.7), pytest.approx(0.9)], [0.1]]
    assert with_call_floor([[f], [f]], 0.2) == [[f], [f]]  # already 0.2: unchanged
    assert with_call_floor([[f]], None) == [[f]]
    # point-to-point chains: only the first phase is floored (0.3 -> 1.0), the second keeps its 0.1
    out = with_call_floor([[f, g], [f]], 1.0, whole_call=False)
    assert [[s.latency_ms for s in ph] for ph in out] == [[pytest.approx(0.8), pytest.approx(1.0)], [0.1]]


@pytest.mark.parametrize("method, bytes_ms, route_lat, kind", [
    ("ring", S / BPMS, 2 * LAT, "allreduce"),
    ("tree", 2 * S / BPMS, 2 * LAT, "p2p"),
    ("ps", 2 * S / BPMS, 2 * LAT, "p2p"),
    ("reducescatter", S / 2 / BPMS, LAT, "p2p"),
])
def test_cpu_call_is_its_bytes_plus_the_measured_call(method, bytes_ms, route_lat, kind):
    cl = make_cluster([2], dtype=CPU)
    plain = algorithm_ms(method, cl, (0, 1), S, 0)
    assert plain == pytest.approx(bytes_ms + route_lat)
    # gloo's all-reduce call: its latencies (a few us) raised to the measured call as a whole; point-to-point
    # chains (tree, ps: two phases): the first phase's latency raised to one measured exchange, the second keeps LAT
    later = route_lat - LAT if kind == "p2p" else 0.0
    assert algorithm_ms(method, cl, (0, 1), S, 0, call_ms=CALLS) == pytest.approx(bytes_ms + CALLS[kind] + later)


def test_gpu_calls_are_unchanged():
    cl = make_cluster([2])
    assert algorithm_ms("ring", cl, (0, 1), S, call_ms=CALLS) == pytest.approx(S / BPMS + 2 * LAT)


def test_choice_weighs_the_call_of_each_kind():
    # 1 kB: ring 0.0001 + 0.004 ms, tree 0.0002 + 0.004 ms without calls: the ring; with a p2p call cheaper than
    # gloo's all-reduce call, the tree (0.0002 + 0.5 < 0.0001 + 0.8)
    cl = make_cluster([2], dtype=CPU)
    assert choose_algorithm(cl, (0, 1), 1e3) == "ring"
    assert choose_algorithm(cl, (0, 1), 1e3, call_ms=CALLS) == "tree"


class CallCost(FixedCost):
    """FixedCost with a measured call cost (ms) on every device."""

    def collective_call_ms(self, device):
        return dict(CALLS)


def _zero3(cost, dtype):
    cl = make_cluster([2], dtype=dtype)
    gg = make_gg([dict(param_bytes=S, param_count=int(S / 4))], [])
    st = Strategy((Decision((4, 4), "ring", zero=3),))
    return simulate(gg, cl, cost, st, TrainingConfig(optimizer="adam")).iteration_ms


def test_zero3_gathers_block_on_cpu_ranks_and_are_prefetched_on_gpus():
    # One group, f = 1 ms/row: F 4 ms, B 8 ms, update 0.2 / 2 (each replica its half). A gather or the
    # reduce-scatter of S: S/2 / 1e7 + 0.002 = 0.102 ms.
    one = S / 2 / BPMS + LAT
    # GPUs: both gathers issued at 0 (prefetched), back to back: fwd 0 -> 0.102, bwd 0.102 -> 0.204 during F;
    # F 0.102 -> 4.102, B -> 12.102, reduce-scatter -> 12.204, update -> 12.304
    assert _zero3(FixedCost([1.0], [0.2]), GPU) == pytest.approx(one + 12 + one + 0.1)
    # CPU ranks: the backward's gather waits for the forward: 0.102 + 4 + 0.102 + 8 + 0.102 + 0.1
    assert _zero3(FixedCost([1.0], [0.2]), CPU) == pytest.approx(3 * one + 12 + 0.1)
    # with a measured p2p call of 0.5 ms, each of the three calls takes S/2 / 1e7 + 0.5 = 0.6 ms
    assert _zero3(CallCost([1.0], [0.2]), CPU) == pytest.approx(3 * (S / 2 / BPMS + 0.5) + 12 + 0.1)


def _profile(contention):
    return {"version": 1, "device_type": "cpu", "threads": 1, "ops": {},
            "contention": {"ranks": 2, "rows": 8, "handoff_ms": 0.1, "alone_stretch": 1.0, "together_stretch": 1.0,
                           "together_speed": 1.0, **contention}}


def test_profile_call_ms_round_trips_and_bad_values_name_the_key():
    db = from_json(_profile({"call_ms": {"allreduce": 0.8, "p2p": 0.5}}), "p.json")
    assert dict(db.contention.call_ms) == CALLS
    assert to_json(db)["contention"]["call_ms"] == CALLS
    assert from_json(_profile({}), "p.json").contention.call_ms is None  # older profiles: no call cost
    with pytest.raises(InputError, match=r"p\.json: contention\.call_ms\.p2p: expected a non-negative number"):
        from_json(_profile({"call_ms": {"p2p": -1}}), "p.json")
    with pytest.raises(InputError, match=r"contention\.call_ms: expected an object with ms per call kind"):
        from_json(_profile({"call_ms": {"nccl": 1.0}}), "p.json")
