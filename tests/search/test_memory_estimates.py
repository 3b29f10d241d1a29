"""The search's memory estimates read the simulator's memory model: Baechi's placers' per-device peak of a
whole-group placement equals the simulator's `peak_memory_gb` (a second method: the simulator builds the strategy's
task graph, its own transfer pairs and shared-parameter bytes), and the starts' and space's row caps are upper
bounds of the simulator's peak."""

import os
import random

import pytest

from tag.strategy import Decision, Strategy, TrainingConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _case(model, topology, training):
    from tag.cost import make_cost_model
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.topology import load_topology

    cluster = load_topology(os.path.join(ROOT, "datasets", "topologies", f"{topology}.json"))
    graph = load_model(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"), n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    return gg, cluster, make_cost_model(gg, training), graph.batch_size


def _whole(device, n, batch):
    return Strategy(tuple(Decision(tuple(batch if x == d else 0 for x in range(n))) for d in device))


# gpt2_tiny ties its token table to its LM head: shared-parameter bytes where the owner group is absent
@pytest.mark.parametrize("model", ["resnet50", "gpt2_tiny"])
@pytest.mark.parametrize("topology", ["heterog8", "cpu4"])
@pytest.mark.parametrize("training", [TrainingConfig(), TrainingConfig("momentum", precision="bf16")],
                         ids=["adam-fp32", "momentum-bf16"])
def test_placer_peak_equals_simulator(model, topology, training):
    from tag.search.baselines_baechi import placement_peak_bytes
    from tag.sim import simulate
    from tag.sim.context import sim_context

    if training.precision == "bf16" and topology == "heterog8":
        pytest.skip("no bf16 before Ampere (heterog8: V100, 1080 Ti, P100)")
    gg, cluster, cost, batch = _case(model, topology, training)
    ctx = sim_context(gg, cluster, cost, training)
    rng = random.Random(7)
    n = cluster.n_devices
    for trial in range(6):
        # contiguous runs (few cut edges) and scattered placements (many)
        if trial % 2:
            device = [rng.randrange(n) for _ in range(gg.n_groups)]
        else:
            cuts = sorted(rng.sample(range(1, gg.n_groups), min(n - 1, gg.n_groups - 1)))
            device = [sum(g >= c for c in cuts) for g in range(gg.n_groups)]
        res = simulate(gg, cluster, cost, _whole(device, n, batch), training)
        for d, dev in enumerate(cluster.devices):
            want = res.peak_memory_gb[dev.id] * 1e9
            got = placement_peak_bytes(ctx, device, d, batch) if d in device else 0.0
            assert got == pytest.approx(want, rel=1e-9, abs=1.0), (trial, dev.id)


def test_unplaced_consumers_are_headroom():
    """With the later half of the groups not placed yet, the first half's device's estimate is the simulator's peak
    once they land on another device: their gradients are counted as received (headroom)."""
    from tag.search.baselines_baechi import placement_peak_bytes
    from tag.sim import simulate
    from tag.sim.context import sim_context

    training = TrainingConfig()
    gg, cluster, cost, batch = _case("resnet50", "heterog8", training)
    ctx = sim_context(gg, cluster, cost, training)
    k = gg.n_groups
    half = k // 2
    partial = [0] * half + [-1] * (k - half)
    elsewhere = [0] * half + [1] * (k - half)
    est = placement_peak_bytes(ctx, partial, 0, batch)
    res = simulate(gg, cluster, cost, _whole(elsewhere, cluster.n_devices, batch), training)
    assert est == pytest.approx(res.peak_memory_gb[cluster.devices[0].id] * 1e9, rel=1e-9)


@pytest.mark.parametrize("model,precision", [("gpt2_tiny", "fp32"), ("resnet_tiny", "fp16"), ("bert_tiny", "bf16")])
def test_the_peak_of_the_hosted_groups_alone_equals_all_groups(model, precision):
    """`memory_terms(groups=)`: a device's peak from the groups it hosts equals its peak from every group (the others
    at 0 rows there), with recomputation and ZeRO 1 mixed in; a sharded decision or a bucket is refused."""
    import numpy as np

    from tag.sim.context import sim_context
    from tag.sim.memory import memory_terms, peak_memory_bytes

    training = TrainingConfig("adam", precision=precision)
    gg, cluster, cost, batch = _case(model, "modern8", training)
    ctx = sim_context(gg, cluster, cost, training)
    rng = random.Random(11)
    k = gg.n_groups
    for _ in range(8):
        on = [rng.random() < 0.4 for _ in range(k)]
        decs = [Decision((batch,) if h else (0,), zero=rng.choice((0, 1)), recompute=rng.random() < 0.3) for h in on]
        recv = (np.array([[rng.uniform(0, 1e6)] for _ in range(k)]), np.array([[rng.uniform(0, 1e6)] for _ in range(k)]))
        recv = (recv[0] * np.array(on)[:, None], recv[1] * np.array(on)[:, None])  # received only where hosted
        whole = peak_memory_bytes(ctx, decs, None, "adam", 123.0, precision, devices=[0], received=recv)
        here = [g for g in range(k) if on[g]]
        part = peak_memory_bytes(ctx, [decs[g] for g in here], None, "adam", 123.0, precision, devices=[0],
                                 received=(recv[0][here], recv[1][here]), groups=here)
        assert part[0] == pytest.approx(whole[0], rel=1e-12)
    with pytest.raises(ValueError, match="subset of groups"):
        memory_terms(ctx, [decs[0]], None, "adam", precision, devices=[0], received=(recv[0][:1], recv[1][:1]),
                     buckets=((0,),), groups=[0])
