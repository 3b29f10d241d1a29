"""Peak memory under ZeRO stages, recomputation and mixed precision (issue 23), worked out by hand, and the
vectorised model against a per-device walk written out here."""

import random

import numpy as np
import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim.context import SimContext
from tag.sim.memory import peak_memory_bytes, pipeline_peak_memory_bytes
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
    # 4 replicas x 4 rows. Persistent P + S + G as the stages shard them; the peak adds the 16 rows' saved input
    # (16,000 B) and, in the backward, the output gradient (16,000 B) and the stage's transient full tensors.
    (0, P + S + P, P + S + P + 32_000),
    (1, P + S / 4 + P, P + S / 4 + P + 32_000),
    # the group's full gradient lives during its backward until the reduce-scatter (G/4 shard + 3/4 G transient)
    (2, P + S / 4 + P / 4, P + S / 4 + P + 32_000),
    # and its full weights are gathered for the backward next to their 1/4 shard
    (3, P / 4 + S / 4 + P / 4, P / 4 + S / 4 + P + P + 32_000),
])
def test_one_linear_with_adam_on_four_replicas(zero, static, peak):
    got = _peak(_linear(), [Decision((4, 4, 4, 4), sync="allreduce", zero=zero)], 4)
    assert got == pytest.approx([peak] * 4)
    assert static <= peak  # the persistent part alone, as the preamble states it
    assert static == {0: 16e6, 1: 10e6, 2: 7e6, 3: 4e6}[zero]


def test_zero_shards_pay_off_over_several_groups():
    # four such layers on 2 replicas x 8 rows: every gradient but the one in flight is a 1/2 shard under stage 2
    gg = make_gg([dict(param_bytes=P, param_count=N, saved_bytes_per_row=ROW, out_bytes_per_row=ROW)] * 4,
                 [(k, k + 1, ROW, 0.0) for k in range(3)])
    saved = 8 * ROW  # at group 0's backward (the peak) only its own saved input is left
    out = 8 * ROW
    z0 = _peak(gg, [Decision((8, 8), sync="allreduce")] * 4, 2)[0]
    z2 = _peak(gg, [Decision((8, 8), sync="allreduce", zero=2)] * 4, 2)[0]
    z3 = _peak(gg, [Decision((8, 8), sync="allreduce", zero=3)] * 4, 2)[0]
    assert z0 == pytest.approx(4 * (P + S) + 4 * P + saved + out)  # all four gradients at the last backward
    # stage 2, at group 0's backward: states halved, shards of groups 1-3 plus group 0's full gradient
    assert z2 == pytest.approx(4 * (P + S / 2) + 3 * P / 2 + P + saved + out)
    # stage 3: weights halved too, group 0's weights gathered for its backward
    assert z3 == pytest.approx(4 * (P / 2 + S / 2) + 3 * P / 2 + P + P + saved + out)
    assert z3 < z2 < z0


def test_recompute_keeps_only_the_inputs():
    # g0 saves 100 B/row, g1 saves 300 B/row and reads 20 B/row from g0; 10 rows on one device, no weights
    gg = make_gg([dict(saved_bytes_per_row=100.0, out_bytes_per_row=20.0),
                  dict(saved_bytes_per_row=300.0, out_bytes_per_row=5.0)], [(0, 1, 20.0, 0.0)])
    plain = _peak(gg, [Decision((10,)), Decision((10,))], 1)[0]
    assert plain == pytest.approx(1000 + 3000 + 50)  # start of g1's backward: all saved + its output gradient
    rec = _peak(gg, [Decision((10,)), Decision((10,), recompute=True)], 1)[0]
    # g1 holds its 200 B of input through the forward; its backward re-runs the forward: + 3000 B transient
    assert rec == pytest.approx(max(1000 + 200 + 50, 1000 + 200 + 3000 + 50))
    rec0 = _peak(gg, [Decision((10,), recompute=True), Decision((10,))], 1)[0]
    # g0 has no input edge here (no data tensors in this graph): it holds nothing; its backward (g1's saved bytes
    # already freed) re-saves 1000 B next to its 200 B output gradient; the peak is g1's forward / backward
    assert rec0 == pytest.approx(max(0 + 3000 + 50, 0 + 1000 + 200))


def test_bf16_halves_the_activation_terms_and_adds_a_16_bit_weight_copy():
    gg = make_gg([dict(param_bytes=P, param_count=N, saved_bytes_per_row=ROW, out_bytes_per_row=ROW)], [])
    fp32 = _peak(gg, [Decision((16,))], 1)[0]
    bf16 = _peak(gg, [Decision((16,))], 1, precision="bf16")[0]
    acts = 16 * ROW + 16 * ROW  # saved input + output gradient
    assert fp32 == pytest.approx(P + S + P + acts)
    assert bf16 == pytest.approx(P + S + P + acts / 2 + P / 2)  # fp32 master weights, grads and states stay
    tf32 = _peak(gg, [Decision((16,))], 1, precision="tf32")[0]
    assert tf32 == pytest.approx(fp32)


def _walk(gg, decs, recv, d, precision, spp=8.0):
    """One device's program written out: forwards in order, then backwards in reverse, every allocation and free."""
    c = 0.5 if precision in ("fp16", "bf16") else 1.0
    mixed = c < 1
    gl = [g for g in range(gg.n_groups) if decs[g].rows[d] > 0]
    n = {g: sum(1 for r in decs[g].rows if r > 0) for g in gl}
    in_row = {g: sum(e.bytes_per_row for e in gg.edges if e.dst == g) for g in gl}
    static = 0.0
    for g in gl:
        grp, z = gg.groups[g], decs[g].zero
        static += grp.param_bytes / (n[g] if z == 3 else 1) + grp.param_count * spp / (n[g] if z >= 1 else 1)
    live, peak, held = 0.0, 0.0, {}
    for g in gl:
        grp, r, z = gg.groups[g], decs[g].rows[d], decs[g].zero
        rf = sum(x[4] for x in recv if (x[0], x[1]) == (g, d))
        full = grp.saved_bytes_per_row * r + grp.saved_bytes_fixed
        held[g] = c * (in_row[g] * r if decs[g].recompute else full + rf)
        live += held[g]
        gathered = grp.param_bytes if z == 3 else 0.0
        peak = max(peak, live + c * grp.out_bytes_per_row * r + gathered + (c * grp.param_bytes if mixed else 0))
    for g in reversed(gl):
        grp, r, z = gg.groups[g], decs[g].rows[d], decs[g].zero
        rb = sum(x[4] for x in recv if (x[2], x[3]) == (g, d))
        shard = grp.param_bytes / (n[g] if z >= 2 else 1)
        live += shard
        t = c * (grp.out_bytes_per_row * r + rb) + (grp.param_bytes if z == 3 else 0.0)
        t += c * grp.param_bytes if mixed else 0.0
        t += c * (grp.saved_bytes_per_row * r + grp.saved_bytes_fixed) if decs[g].recompute else 0.0
        t += grp.param_bytes - shard
        peak = max(peak, live + t)
        live -= held[g]
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
    got = pipeline_peak_memory_bytes(_ctx(_linear(), 2), st, [], "adam", np.zeros(2))
    micro = 2 * ROW
    # static: P/2 shard + S/2 + P gathered for the step; B0 holds micro-batch 1's saved bytes, its own, the whole
    # accumulated gradient and its output gradient
    assert got[0] == pytest.approx(P / 2 + S / 2 + P + micro + micro + P + micro)
