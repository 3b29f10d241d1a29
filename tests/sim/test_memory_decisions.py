"""Peak memory under ZeRO stages, recomputation and mixed precision (issue 23), worked out by hand, and the
vectorised model against a per-device walk written out here."""

import random

import numpy as np
import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim.context import SimContext
from tag.sim.memory import peak_memory_bytes
from tag.sim.peak_memory import pipeline_peak_memory_bytes
from tag.strategy import Decision, Strategy, TrainingConfig

N = 1_000_000  # one Linear 1000 x 1000 (no bias): 1e6 fp32 weights
P = 4.0 * N  # weight bytes = gradient bytes
S = 8.0 * N  # Adam: two fp32 moments
ROW = 4000.0  # one row of its 1000-wide fp32 input (saved) and output


def _ctx(gg, n_dev, precision="fp32", optimizer="adam"):
    return SimContext(gg, make_cluster([n_dev]), FixedCost([0.1] * gg.n_groups), TrainingConfig(optimizer,
                                                                                             precision=precision))


def _peak(gg, decisions, n_dev, precision="fp32", optimizer="adam"):
    """Peak bytes per device of row maps that move nothing between groups (no received slices)."""
    return list(peak_memory_bytes(_ctx(gg, n_dev, precision, optimizer), decisions, [], optimizer, np.zeros(n_dev),
                                  precision))


def _linear():
    return make_gg([dict(param_bytes=P, param_count=N, saved_bytes_per_row=ROW, out_bytes_per_row=ROW)], [])


@pytest.mark.parametrize("zero, static, peak", [
    # 4 replicas x 4 rows, a GPU cluster (Adam's foreach step: one temporary per updated weight). Persistent
    # P + S + G as the stages shard them. Backward peak: + the 16 rows' saved input (16,000 B), the output gradient
    # (16,000 B) and the stage's transient full tensors; optimizer step: the kept gradient + sqrt(v) of the weights
    # the replica updates.
    (0, P + S + P, P + S + P + P),  # step: 20e6 > backward 16.032e6
    (1, P + S / 4 + P, P + S / 4 + P + P / 4),  # step: 11e6 > backward 10.032e6
    # the group's full gradient lives during its backward until the reduce-scatter (G/4 shard + 3/4 G transient)
    (2, P + S / 4 + P / 4, P + S / 4 + P + 32_000),  # backward 10.032e6 > step 8e6
    # and its full weights are gathered for the backward next to their 1/4 shard
    (3, P / 4 + S / 4 + P / 4, P / 4 + S / 4 + P + P + 32_000),  # backward 11.032e6 > step 5e6
])
def test_one_linear_with_adam_on_four_replicas(zero, static, peak):
    got = _peak(_linear(), [Decision((4, 4, 4, 4), sync="allreduce", zero=zero)], 4)
    assert got == pytest.approx([peak] * 4)
    assert static <= peak  # the persistent part alone, as the preamble states it
    assert static == {0: 16e6, 1: 10e6, 2: 7e6, 3: 4e6}[zero]


def test_cpu_adam_steps_one_weight_at_a_time():
    # torch's single-tensor Adam (CPU tensors): sqrt(v) and its quotient, 2 x the largest weight, not one per weight
    from tag.topology.cluster import DeviceType

    cpu = DeviceType("cpu", peak_tflops=0.1, memory_gb=8.0, memory_bandwidth_gbps=100.0, kind="cpu")
    gg = _linear()
    ctx = SimContext(gg, make_cluster([1], dtype=cpu), FixedCost([0.1]), TrainingConfig("adam"))
    got = peak_memory_bytes(ctx, [Decision((16,))], [], "adam", np.zeros(1))[0]
    # no tensor information in this graph: the largest weight is unknown (0), so the step adds nothing and the
    # backward peak stands: 16 rows' saved input + output gradient
    assert got == pytest.approx(P + S + P + 2 * 16 * ROW)


def test_zero_shards_pay_off_over_several_groups():
    # four such layers on 2 replicas x 8 rows; momentum (one state, updated in place: no step temporaries)
    m = 4.0 * N
    gg = make_gg([dict(param_bytes=P, param_count=N, saved_bytes_per_row=ROW, out_bytes_per_row=ROW)] * 4,
                 [(k, k + 1, ROW, 0.0) for k in range(3)])
    saved = 8 * ROW  # at group 0's backward (the peak) only its own saved input is left
    out = 8 * ROW  # its output gradient; group 0 has no input from another group, so no input gradient
    z0, z2, z3 = (_peak(gg, [Decision((8, 8), sync="allreduce", zero=z)] * 4, 2, optimizer="momentum")[0]
                  for z in (0, 2, 3))
    # stage 0: the four gradients live in their bucket for good; the peak is group 3's backward: all four groups'
    # saved inputs, its output gradient and the input gradient it hands group 2
    assert z0 == pytest.approx(4 * (P + m) + 4 * P + 4 * saved + out + 8 * ROW)
    # stage 2, at group 0's backward: states halved, shards of groups 1-3 plus group 0's full gradient
    assert z2 == pytest.approx(4 * (P + m / 2) + 3 * P / 2 + P + saved + out)
    # stage 3: weights halved too, group 0's weights gathered for its backward
    assert z3 == pytest.approx(4 * (P / 2 + m / 2) + 3 * P / 2 + P + P + saved + out)
    assert z3 < z2 < z0


def test_recompute_keeps_only_the_inputs():
    # g0 saves 100 B/row, g1 saves 300 B/row and reads 20 B/row from g0; 10 rows on one device, no weights
    gg = make_gg([dict(saved_bytes_per_row=100.0, out_bytes_per_row=20.0),
                  dict(saved_bytes_per_row=300.0, out_bytes_per_row=5.0)], [(0, 1, 20.0, 0.0)])
    plain = _peak(gg, [Decision((10,)), Decision((10,))], 1)[0]
    # start of g1's backward: all saved + its output gradient (50) + the input gradient it hands g0 (200)
    assert plain == pytest.approx(1000 + 3000 + 50 + 200)
    rec = _peak(gg, [Decision((10,)), Decision((10,), recompute=True)], 1)[0]
    # g1 holds its 200 B of input through the forward; its backward re-runs the forward: + 3000 B transient
    assert rec == pytest.approx(1000 + 200 + 3000 + 50 + 200)
    rec0 = _peak(gg, [Decision((10,), recompute=True), Decision((10,))], 1)[0]
    # g0 has no input edge here (no data tensors in this graph): it holds nothing; its backward (g1's saved bytes
    # already freed) re-saves 1000 B next to its 200 B output gradient; the peak is g1's backward
    assert rec0 == pytest.approx(max(3000 + 50 + 200, 1000 + 200))


def test_bf16_halves_the_activation_terms_and_adds_a_16_bit_weight_copy():
    m = 4.0 * N  # momentum: no step temporaries, so the backward is the peak
    gg = make_gg([dict(param_bytes=P, param_count=N, saved_bytes_per_row=ROW, out_bytes_per_row=ROW)], [])
    fp32 = _peak(gg, [Decision((16,))], 1, optimizer="momentum")[0]
    bf16 = _peak(gg, [Decision((16,))], 1, precision="bf16", optimizer="momentum")[0]
    acts = 16 * ROW + 16 * ROW  # saved input + output gradient
    assert fp32 == pytest.approx(P + m + P + acts)
    assert bf16 == pytest.approx(P + m + P + acts / 2 + P / 2)  # fp32 master weights, grads and states stay
    tf32 = _peak(gg, [Decision((16,))], 1, precision="tf32", optimizer="momentum")[0]
    assert tf32 == pytest.approx(fp32)


def _walk(gg, decs, recv, d, precision, spp=8.0):
    """One device's program written out: forwards in order, backwards in reverse, then the optimizer step, every
    allocation and free."""
    c = 0.5 if precision in ("fp16", "bf16") else 1.0
    mixed = c < 1
    gl = [g for g in range(gg.n_groups) if decs[g].rows[d] > 0]
    n = {g: sum(1 for r in decs[g].rows if r > 0) for g in gl}
    in_row = {g: sum(e.bytes_per_row for e in gg.edges if e.dst == g) for g in gl}
    static = 0.0
    for g in gl:
        grp, z = gg.groups[g], decs[g].zero
        static += grp.param_bytes / (n[g] if z == 3 else 1) + grp.param_count * spp / (n[g] if z >= 1 else 1)
        static += grp.param_bytes if n[g] > 1 and z <= 1 else 0.0  # a bucket's gradient buffer, for good
    live, peak, held = 0.0, 0.0, {}
    # what a group holds, with the 16-bit weight copy its products keep under fp16/bf16
    full = {g: c * (gg.groups[g].saved_bytes_per_row * decs[g].rows[d] + gg.groups[g].saved_bytes_fixed)
            + (c * gg.groups[g].param_bytes if mixed else 0) for g in gl}
    for g in gl:
        grp, r, z = gg.groups[g], decs[g].rows[d], decs[g].zero
        rf = sum(x[4] for x in recv if (x[0], x[1]) == (g, d))
        held[g] = c * in_row[g] * r if decs[g].recompute else full[g] + c * rf
        live += held[g]
        gathered = grp.param_bytes if z == 3 else 0.0
        copy = c * grp.param_bytes if mixed and decs[g].recompute else 0.0  # made anew by a recomputed forward
        peak = max(peak, live + c * grp.out_bytes_per_row * r + gathered + copy)
    for g in reversed(gl):
        grp, r, z = gg.groups[g], decs[g].rows[d], decs[g].zero
        rb = sum(x[4] for x in recv if (x[2], x[3]) == (g, d))
        shard = grp.param_bytes / (n[g] if z >= 2 else 1)
        live += 0.0 if n[g] > 1 and z <= 1 else shard
        t = c * (grp.out_bytes_per_row * r + rb) + (grp.param_bytes if z == 3 else 0.0)
        t += full[g] if decs[g].recompute else 0.0
        t += grp.param_bytes - shard
        t += c * in_row[g] * r  # the input gradients it hands back
        peak = max(peak, live + t)
        live -= held[g]
    # the optimizer step (GPU cluster: Adam's foreach sqrt(v) of every weight the device updates)
    updated = sum(gg.groups[g].param_bytes / (n[g] if decs[g].zero >= 1 else 1) for g in gl)
    peak = max(peak, live + updated)
    return static + peak


def test_vectorised_peak_equals_the_walk_of_each_device():
    rng = random.Random(23)
    for _ in range(60):
        k, n = rng.randint(1, 5), rng.randint(1, 4)
        gg = make_gg([dict(param_bytes=4.0 * p, param_count=p, saved_bytes_per_row=rng.choice([0.0, 10.0, 50.0]),
                           saved_bytes_fixed=rng.choice([0.0, 7.0]), out_bytes_per_row=rng.choice([0.0, 3.0]))
                      for p in (rng.choice([0, 100, 1000]) for _ in range(k))],
                     [(g, g + 1, float(rng.randint(0, 9)), 0.0) for g in range(k - 1)])
        decs = []
        for _ in range(k):
            rows = tuple(rng.choice([0, 0, 2, 5]) for _ in range(n))
            multi = sum(1 for r in rows if r) > 1
            decs.append(Decision(rows, zero=rng.choice([0, 1, 2, 3]) if multi else 0, recompute=rng.random() < 0.4))
        recv = [(rng.randrange(k), rng.randrange(n), rng.randrange(k), rng.randrange(n), float(rng.randint(1, 99)))
                for _ in range(rng.randint(0, 5))]
        recv = [r for r in recv if decs[r[0]].rows[r[1]] > 0 and decs[r[2]].rows[r[3]] > 0]
        precision = rng.choice(["fp32", "tf32", "bf16", "fp16"])
        ctx = SimContext(gg, make_cluster([n]), FixedCost([0.0] * k), TrainingConfig("adam", precision=precision))
        got = peak_memory_bytes(ctx, decs, recv, "adam", np.zeros(n), precision)
        for d in range(n):
            assert got[d] == pytest.approx(_walk(gg, decs, recv, d, precision)), (d, decs, precision)


def test_pipelined_zero_3_keeps_whole_weights_and_unsharded_gradients():
    # one stage on 2 replicas x 4 rows, GPipe over 2 micro-batches (F0 F1 B0 B1): 2 rows x ROW saved per micro-batch
    from tag.strategy.pipeline import Pipeline, Stage

    pl = Pipeline((Stage((0,), (0, 1)),), 2, "gpipe", 1)
    st = Strategy((Decision((4, 4), sync="allreduce", zero=3),), pipeline=pl)
    micro = 2 * ROW
    # static: P/2 shard + S/2 (Adam) + P gathered for the step. Adam's step holds the whole accumulated gradient
    # and sqrt(v) of the 1/2 shard it updates: P + P/2 = 6e6, above B0's 3 x micro + P, and the last backward
    # pass's output (micro), which the pipeline runtime still references during the step
    got = pipeline_peak_memory_bytes(_ctx(_linear(), 2), st, [], "adam", np.zeros(2))
    assert got[0] == pytest.approx(P / 2 + S / 2 + P + P + P / 2 + micro)
    # momentum (in place): B0 holds micro-batch 1's saved bytes, its own, the whole gradient and its output gradient
    got = pipeline_peak_memory_bytes(_ctx(_linear(), 2, optimizer="momentum"), st, [], "momentum", np.zeros(2))
    assert got[0] == pytest.approx(P / 2 + 4.0 * N / 2 + P + micro + micro + P + micro)
