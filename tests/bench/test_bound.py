"""The compute bound 1 / sum_d (1 / T_d): by hand on a two-device toy, against a brute force over work shares, and
never beaten by a plan on the bench's cases (small search budgets); the latency floor by hand on a two-layer model
and never beaten either."""

import math
import os
from types import SimpleNamespace

import pytest

from tag.bench.ideal import compute_bound, flops_bound_ms, harmonic_bound_ms, latency_floor_ms

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATASETS = os.path.join(ROOT, "datasets")


class _ToyCost:
    """Group g's forward on type t takes fwd[g] x slow[t] ms at the full batch (8 rows); backward 2x that."""

    fwd = {0: 2.0, 1: 4.0}
    slow = {"fast": 1.0, "slow": 3.0}

    def group_fwd_ms(self, g, t, rows):
        assert rows == 8
        return self.fwd[g] * self.slow[t.name]

    def group_bwd_ms(self, g, t, rows):
        return 2.0 * self.group_fwd_ms(g, t, rows)


def _toy():
    gg = SimpleNamespace(groups=[SimpleNamespace(id=0, fwd_flops_per_row=1e9, fwd_flops_fixed=0.0),
                                 SimpleNamespace(id=1, fwd_flops_per_row=2e9, fwd_flops_fixed=4e9)])
    fast = SimpleNamespace(name="fast", peak_tflops=10.0)
    slow = SimpleNamespace(name="slow", peak_tflops=2.0)
    cluster = SimpleNamespace(devices=[SimpleNamespace(type=fast), SimpleNamespace(type=slow)])
    return gg, cluster


def test_bound_by_hand_two_devices():
    gg, cluster = _toy()
    b = compute_bound(gg, cluster, _ToyCost(), 8)
    # fast: (2 + 4) forward + (4 + 8) backward = 18 ms; slow: 3 x 18 = 54 ms
    assert b.device_ms == (18.0, 54.0)
    # shares 3/4 and 1/4 finish together: 0.75 x 18 = 0.25 x 54 = 13.5 ms
    assert b.iteration_ms == pytest.approx(13.5)
    # forward FLOPs = 8 x (1e9 + 2e9) + 4e9 = 28e9; 3 x 28e9 / (12e12 FLOP/s) = 7 ms
    assert flops_bound_ms(gg, cluster, 8) == pytest.approx(7.0)


@pytest.mark.parametrize("device_ms", [[18.0, 54.0], [5.0, 7.0, 11.0], [4.0, 4.0, 4.0, 4.0]])
def test_bound_is_the_best_split_of_the_work(device_ms):
    # brute force: shares on a grid of 1/120 summing to 1; the slowest device's share x T_d, minimised
    steps = 120
    n = len(device_ms)
    best = math.inf

    def walk(i, left, acc):
        nonlocal best
        if i == n - 1:
            best = min(best, max(acc, left / steps * device_ms[i]))
            return
        for k in range(left + 1):
            walk(i + 1, left - k, max(acc, k / steps * device_ms[i]))
    walk(0, steps, 0.0)
    bound = harmonic_bound_ms(device_ms)
    assert bound <= best + 1e-12
    assert best - bound <= max(device_ms) / steps


def _plan_case(model, topo, playouts, refine):
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.planner import plan

    inp = load_inputs(os.path.join(DATASETS, "models", f"{model}.onnx"),
                      os.path.join(DATASETS, "topologies", f"{topo}.json"), ModelOptions())
    res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=playouts, refine_simulations=refine,
               budget_s=120.0, seed=0, sfb=False)
    return inp, res


def _check_case(inp, res):
    bound = max(compute_bound(inp.gg, inp.cluster, inp.cost, inp.batch_size).iteration_ms,
                latency_floor_ms(inp.gg, inp.cluster, inp.cost))
    fits = [(name, r.iteration_ms) for name, (_, r) in res.baselines.items() if not r.oom]
    fits += [(name, r.iteration_ms) for name, (_, r) in res.candidates.items() if not r.oom]
    if not res.result.oom:
        fits.append(("plan", res.result.iteration_ms))
    assert fits
    for name, ms in fits:
        assert ms >= bound * (1 - 1e-9), (name, ms, bound)


# CI: every bench model on the bench's two 8-device topologies (small budgets); TAG_BOUND_ALL=1 runs every
# case of the suite (tag.bench.suite.MODELS x TOPOLOGIES: 16 and 64 devices too, minutes each)
def _cases():
    from tag.bench.suite import MODELS, TOPOLOGIES

    topos = TOPOLOGIES if os.environ.get("TAG_BOUND_ALL") else ("heterog8", "modern8")
    return [(m, t) for m in MODELS for t in topos if os.environ.get("TAG_BOUND_ALL") or m != "resnet101"]


@pytest.mark.parametrize("model, topo", _cases())
def test_no_plan_beats_the_bound(model, topo):
    inp, res = _plan_case(model, topo, playouts=2, refine=4)
    _check_case(inp, res)


def _two_layers(tmp_path, n=256):
    """X[batch, n] -> Gemm(W0, b0) -> Relu -> Gemm(W1, b1) -> Y, weights as graph inputs."""
    import onnx
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", n])]
    for i in range(2):
        inputs += [helper.make_tensor_value_info(f"W{i}", TensorProto.FLOAT, [n, n]),
                   helper.make_tensor_value_info(f"b{i}", TensorProto.FLOAT, [n])]
    nodes = [helper.make_node("Gemm", ["X", "W0", "b0"], ["H"], name="gemm0", transB=1),
             helper.make_node("Relu", ["H"], ["R"], name="relu"),
             helper.make_node("Gemm", ["R", "W1", "b1"], ["Y"], name="gemm1", transB=1)]
    out = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", n])]
    path = str(tmp_path / "two.onnx")
    onnx.save(helper.make_model(helper.make_graph(nodes, "two", inputs, out),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("precision, kernels", [("fp32", 3), ("fp16", 3 + 4)])
def test_latency_floor_by_hand(tmp_path, precision, kernels):
    """Groups [gemm0] -> [relu, gemm1]: one forward kernel per op (3), plus under fp16 one weight cast per Gemm
    weight tensor (W and b of each: 4). Launch L = 20 us on the GPU kind; every other term of an op vanishes at
    share 0. The path's forward and backward each pay them: floor = 2 x kernels x L."""
    from tag.cost.efficiency import params_for
    from tag.cost.roofline import RooflineCostModel
    from tag.graph import load_model
    from tag.strategy import TrainingConfig
    from tag.strategy.regroup import groupgraph_from_plan
    from tag.topology.loader import parse_topology

    gg = groupgraph_from_plan(load_model(_two_layers(tmp_path), batch_size=64), [["gemm0"], ["relu", "gemm1"]])
    cost = RooflineCostModel(gg, TrainingConfig(precision=precision))
    cluster = parse_topology({"version": 1, "machines": [{"name": "m0", "devices": [{"type": "V100-16GB",
                              "count": 2}], "intra_bandwidth_gbps": 100}]}, "pair")
    launch_ms = params_for("gpu").launch_us / 1e3
    assert launch_ms == pytest.approx(0.02)
    assert latency_floor_ms(gg, cluster, cost) == pytest.approx(2 * kernels * launch_ms, rel=1e-12)
    # every forward at any rows is above its group's floor (the floor is the forward at share 0)
    for g in (0, 1):
        floor = cost.launch_floor_ms(g, cluster.devices[0].type)
        assert cost.group_fwd_ms(g, cluster.devices[0].type, 1) > floor
        assert cost.group_bwd_ms(g, cluster.devices[0].type, 1) > floor


def test_no_plan_with_sfb_or_shards_beats_the_latency_floor():
    """SFB moves weight-gradient kernels out of the backward, shards slice the ops: neither below the floor."""
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.planner import plan

    inp = load_inputs(os.path.join(DATASETS, "models", "bert_tiny.onnx"),
                      os.path.join(DATASETS, "topologies", "modern8.json"), ModelOptions())
    res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=4, refine_simulations=8, budget_s=120.0,
               seed=0, sfb=True)
    floor = latency_floor_ms(inp.gg, inp.cluster, inp.cost)
    assert floor > 0
    fits = [r.iteration_ms for _, r in list(res.baselines.values()) + list(res.candidates.values()) if not r.oom]
    assert min(fits + [res.result.iteration_ms]) >= floor
