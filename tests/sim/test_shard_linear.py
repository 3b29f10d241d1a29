"""Issue 22, must show 1: a 4096 x 4096 linear layer (Gemm, batch 64) split over two devices of different speeds
at 1:3, by columns and by rows; every figure worked out by hand below.

Devices (one machine, 100 Gbit/s between them = 12.5e6 bytes per ms each way, 2 us per hop): `slow` (10 TFLOP/s)
at position 0 with share 1/4, `fast` (30 TFLOP/s) at position 1 with share 3/4. The roofline runs with efficiency
1 for products, no launch cost and a memory bandwidth so large that every op is compute-bound, so an op of F FLOPs
takes F / peak exactly (peak in FLOP per ms: TFLOP/s x 1e9).
"""

import onnx
import pytest
from onnx import TensorProto, helper

from tag.cost.efficiency import EfficiencyParams
from tag.cost.roofline import RooflineCostModel
from tag.graph import load_model
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.regroup import groupgraph_from_plan
from tag.strategy.shard import Shard
from tag.topology.loader import parse_topology

N, B = 4096, 64
S = B * N * 4  # bytes of one activation [64, 4096] fp32: 1 MiB
LINK = 12.5e6  # bytes per ms
HOP = 0.002  # ms
F_FWD = 2.0 * B * N * N + B * N  # Gemm: 2 M N K + M N for the bias
F_BWD = 2.0 * F_FWD  # input and weight gradients
P = (N * N + N) * 4.0  # weight and bias bytes


def _model(tmp_path, layers: int = 1) -> str:
    """X[N?, 4096] -> Gemm(W0, b0, transB=1) [-> Gemm(W1, b1)] -> Y; weights as graph inputs (no values)."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", N])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", N])
    inputs, nodes = [x], []
    src = "X"
    for i in range(layers):
        inputs += [helper.make_tensor_value_info(f"W{i}", TensorProto.FLOAT, [N, N]),
                   helper.make_tensor_value_info(f"b{i}", TensorProto.FLOAT, [N])]
        out = "Y" if i == layers - 1 else f"H{i}"
        nodes.append(helper.make_node("Gemm", [src, f"W{i}", f"b{i}"], [out], name=f"gemm{i}", transB=1))
        src = out
    model = helper.make_model(helper.make_graph(nodes, "linear", inputs, [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = str(tmp_path / f"linear{layers}.onnx")
    onnx.save(model, path)
    return path


def _cluster(slow_gb: float = 16.0, fast_gb: float = 16.0):
    return parse_topology({
        "version": 1,
        "device_types": {"slow": {"peak_tflops": 10.0, "memory_gb": slow_gb, "memory_bandwidth_gbps": 1e9},
                         "fast": {"peak_tflops": 30.0, "memory_gb": fast_gb, "memory_bandwidth_gbps": 1e9}},
        "machines": [{"name": "m0", "devices": [{"type": "slow", "count": 1}, {"type": "fast", "count": 1}],
                      "intra_bandwidth_gbps": 100}]}, "pair")


EXACT = EfficiencyParams(base={"matmul": 1.0}, launch_us=0.0, floor=1.0)


def _setup(tmp_path, layers=1, groups=None, optimizer="sgd", **cluster):
    graph = load_model(_model(tmp_path, layers), batch_size=B)
    names = [op.name for op in graph.ops]
    gg = groupgraph_from_plan(graph, groups or [names])
    training = TrainingConfig(optimizer=optimizer)
    return gg, _cluster(**cluster), RooflineCostModel(gg, training, params={"gpu": EXACT}), training


def _run(setup, decisions, trace=True):
    gg, cl, cost, training = setup
    return simulate(gg, cl, cost, Strategy(tuple(decisions)), training, trace=trace)


def _events(res, name):
    """The trace's complete events whose name starts with `name`, times in ms (the trace has us)."""
    return [dict(e, ts=e["ts"] / 1e3, dur=e["dur"] / 1e3) for e in res.trace_events
            if e.get("ph") == "X" and e["name"].startswith(name)]


def _flows(res, name):
    """The flows whose label starts with `name`, once each (the trace shows a flow on every link it crosses)."""
    return list({(e["name"], e["ts"], e["dur"]): e for e in _events(res, name) if e["cat"] == "comm"}.values())


SLOW_PEAK, FAST_PEAK = 10.0e9, 30.0e9  # FLOP per ms


@pytest.mark.parametrize("split", ["column", "row"])
def test_compute_is_the_share_of_the_flops_at_each_device_speed(tmp_path, split):
    setup = _setup(tmp_path)
    res = _run(setup, [Decision((B, B), shard=Shard(split, ((0, 1),), (0.25, 0.75)))])
    fwd = {e["tid"]: e["dur"] for e in _events(res, "fwd g0") if e["dur"] > 0}
    bwd = {e["tid"]: e["dur"] for e in _events(res, "bwd g0") if e["dur"] > 0}
    # 1024 of 4096 units on the slow device, 3072 on the fast one: 1/4 F / 10 = 3/4 F / 30
    assert fwd[0] == pytest.approx(0.25 * F_FWD / SLOW_PEAK, rel=1e-12)
    assert fwd[1] == pytest.approx(0.75 * F_FWD / FAST_PEAK, rel=1e-12)
    assert bwd[0] == pytest.approx(0.25 * F_BWD / SLOW_PEAK, rel=1e-12)
    assert bwd[1] == pytest.approx(0.75 * F_BWD / FAST_PEAK, rel=1e-12)
    whole = _run(setup, [Decision((B, 0))])  # the slow device alone takes 4 x as long
    assert sum(e["dur"] for e in _events(whole, "fwd g0") + _events(whole, "bwd g0")) == pytest.approx(
        (F_FWD + F_BWD) / SLOW_PEAK, rel=1e-12)


@pytest.mark.parametrize("split", ["column", "row"])
def test_a_slice_runs_at_the_efficiency_of_its_size_and_launches_whole(tmp_path, split):
    """With a size-dependent efficiency e(F) = F / (F + H) and a launch cost L per kernel, an op of F FLOPs takes
    F / (peak e(F)) + kernels L = (F + H) / peak + kernels L. A slice of share s runs s F FLOPs, so it takes
    (s F + H) / peak + kernels L, not s x the whole op's time: each device launches the Gemm's kernel (one
    forward, two backward: input and weight gradients) and pays the small-kernel inefficiency H itself."""
    H, LAUNCH_US = 1e9, 20.0
    gg, cl, _, training = _setup(tmp_path)
    params = EfficiencyParams(base={"matmul": 1.0}, half_size_flops=H, launch_us=LAUNCH_US, floor=1e-9)
    setup = (gg, cl, RooflineCostModel(gg, training, params={"gpu": params}), training)
    res = _run(setup, [Decision((B, B), shard=Shard(split, ((0, 1),), (0.25, 0.75)))])
    fwd = {e["tid"]: e["dur"] for e in _events(res, "fwd g0") if e["dur"] > 0}
    bwd = {e["tid"]: e["dur"] for e in _events(res, "bwd g0") if e["dur"] > 0}
    launch = LAUNCH_US / 1e3
    for tid, s, peak in ((0, 0.25, SLOW_PEAK), (1, 0.75, FAST_PEAK)):
        assert fwd[tid] == pytest.approx((s * F_FWD + H) / peak + launch, rel=1e-9)
        assert bwd[tid] == pytest.approx((s * F_BWD + H) / peak + 2 * launch, rel=1e-9)
    # the old reading, s x the whole op, would have been 0.25 x ((F + H) / peak + L) on the slow device
    assert fwd[0] > 0.25 * ((F_FWD + H) / SLOW_PEAK + launch) * 1.3


def test_column_split_gathers_its_output_for_the_loss(tmp_path):
    """Y is a graph output: the replica all-gathers it. Uneven shares run as a ring of 2 equal pieces padded to the
    larger: 2 x 3/4 S in all, (n - 1)/n of it per hop, one step."""
    res = _run(_setup(tmp_path), [Decision((B, B), shard=Shard("column", ((0, 1),), (0.25, 0.75)))])
    gathers = _events(res, "shard fwd g0 allgather")
    assert gathers and all(e["dur"] == pytest.approx(0.5 * 1.5 * S / LINK, rel=1e-9) for e in gathers)
    compute = 0.25 * F_FWD / SLOW_PEAK
    assert min(e["ts"] for e in gathers) == pytest.approx(compute, rel=1e-9)
    bwd = [e for e in _events(res, "bwd g0") if e["dur"] > 0]
    # the backward starts after the gather's bytes and its one 2 us step
    assert min(e["ts"] for e in bwd) == pytest.approx(compute + 0.75 * S / LINK + HOP, rel=1e-9)
    assert not _events(res, "shard bwd")  # X is data: no input gradient to all-reduce


def test_row_split_all_reduces_the_partial_outputs(tmp_path):
    """Ring all-reduce over 2 devices: 2 (n - 1)/n x S = S per hop, 2 (n - 1) = 2 steps."""
    res = _run(_setup(tmp_path), [Decision((B, B), shard=Shard("row", ((0, 1),), (0.25, 0.75)))])
    reduces = _events(res, "shard fwd g0 allreduce")
    assert reduces and all(e["dur"] == pytest.approx(S / LINK, rel=1e-9) for e in reduces)
    bwd = [e for e in _events(res, "bwd g0") if e["dur"] > 0]
    assert min(e["ts"] for e in bwd) == pytest.approx(0.25 * F_FWD / SLOW_PEAK + S / LINK + 2 * HOP, rel=1e-9)


def test_column_input_gradient_is_all_reduced_in_backward(tmp_path):
    """Two layers in two groups: gemm0 whole on the fast device, gemm1 split by columns. gemm1's input H0 is an
    activation, so its gradient (S bytes) is all-reduced over the replica after gemm1's backward; then the fast
    device (which computes gemm0) holds it whole and nothing moves back."""
    setup = _setup(tmp_path, layers=2, groups=[["gemm0"], ["gemm1"]])
    res = _run(setup, [Decision((0, B)), Decision((B, B), shard=Shard("column", ((0, 1),), (0.25, 0.75)))])
    reduces = _events(res, "shard bwd g1 allreduce")
    assert reduces and all(e["dur"] == pytest.approx(S / LINK, rel=1e-9) for e in reduces)
    assert not _events(res, "grad g1->g0")
    acts = _flows(res, "act g0->g1")  # H0 whole to the slow device: S bytes
    assert len(acts) == 1 and acts[0]["dur"] == pytest.approx(S / LINK, rel=1e-9)
    t_bwd0 = [e for e in _events(res, "bwd g0") if e["dur"] > 0][0]
    last_bwd1 = max(e["ts"] + e["dur"] for e in _events(res, "bwd g1") if e["dur"] > 0)
    assert t_bwd0["ts"] == pytest.approx(last_bwd1 + S / LINK + 2 * HOP, rel=1e-9)


def test_megatron_pair_across_groups_moves_nothing_between_them(tmp_path):
    """gemm0 by columns, gemm1 by rows on the same grid and shares: H0 stays split (no gather, no transfer), and
    only gemm1's output is all-reduced."""
    setup = _setup(tmp_path, layers=2, groups=[["gemm0"], ["gemm1"]])
    sh = ((0, 1),), (0.25, 0.75)
    res = _run(setup, [Decision((B, B), shard=Shard("column", *sh)), Decision((B, B), shard=Shard("row", *sh))])
    assert not _events(res, "act g0->g1") and not _events(res, "grad g1->g0")
    assert not _events(res, "shard fwd g0") and len(_flows(res, "shard fwd g1 allreduce")) == 1
    # different shares: g1's devices need other bands of H0, which move point to point
    other = _run(setup, [Decision((B, B), shard=Shard("column", *sh)),
                         Decision((B, B), shard=Shard("row", ((0, 1),), (0.5, 0.5)))])
    acts = _events(other, "act g0->g1")  # gathered whole on both, each then needs nothing: no transfer
    assert _events(other, "shard fwd g0 allgather") and not acts


def test_weights_at_the_share_and_the_layer_fits_only_sharded(tmp_path):
    """SGD (no optimizer states). Whole on one device the step holds the weights, their gradients: 2 P + the
    activations. Memory sized so neither device holds 2 P (the slow one 0.92 x 0.06 GB, the fast one
    0.92 x 0.12 GB against 2 P = 134.2 MB), but 1:3 fits: 2 P / 4 = 33.6 MB on the slow and 2 x 3/4 P = 100.7 MB
    on the fast. The even split puts 67.1 MB on the slow device: OOM."""
    setup = _setup(tmp_path, slow_gb=0.06, fast_gb=0.12)
    for whole in ((B, 0), (0, B)):
        assert _run(setup, [Decision(whole)], trace=False).oom
    assert _run(setup, [Decision((B // 2, B // 2), sync="ring")], trace=False).oom  # data parallel: whole copies
    res = _run(setup, [Decision((B, B), shard=Shard("column", ((0, 1),), (0.25, 0.75)))], trace=False)
    assert not res.oom
    w_slow, w_fast = (1024 * N + 1024) * 4.0, (3072 * N + 3072) * 4.0  # weight and bias slices
    assert w_slow + w_fast == P
    act = 3 * S  # X, Y and the loss gradient of Y at most, each 1 MiB per device
    assert w_slow * 2 <= res.peak_memory_gb["m0/0"] * 1e9 <= w_slow * 2 + act
    assert w_fast * 2 <= res.peak_memory_gb["m0/1"] * 1e9 <= w_fast * 2 + act
    assert _run(setup, [Decision((B, B), shard=Shard("column", ((0, 1),), (0.5, 0.5)))], trace=False).oom
    assert _run(setup, [Decision((B, B), shard=Shard("column", ((0, 1),), (0.75, 0.25)))], trace=False).oom
