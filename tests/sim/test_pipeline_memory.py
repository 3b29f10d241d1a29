"""Peak memory of pipelined iterations: the micro-batches a schedule keeps in flight, by hand (issue 21, must-show 4)
and against a brute-force walk of every device's program."""

import random

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim import simulate
from tag.sim.build import build_task_graph
from tag.sim.context import sim_context
from tag.strategy import Decision, Strategy, TrainingConfig, slices
from tag.strategy.pipeline import Pipeline, Stage, max_in_flight, stage_order

TC = TrainingConfig(optimizer="adam")  # 8 bytes of state per parameter


def _chain(schedule, k=1, groups=None, edge_bytes_per_row=0.0):
    # group 0 on device 0 (stage 0) -> group 1 on device 1 (stage 1); batch 8 in 4 micro-batches of 2 rows
    cl = make_cluster([2])
    gg = make_gg(groups or [dict(saved_bytes_per_row=1e6), dict(saved_bytes_per_row=5e5)],
                 [(0, 1, edge_bytes_per_row, 0.0)])
    pl = Pipeline((Stage((0,), (0,)), Stage((1,), (1,))), 4, schedule, k)
    return gg, cl, Strategy((Decision((8, 0)), Decision((0, 8))), pipeline=pl)


def _peaks(schedule, k=1, **kw):
    gg, cl, st = _chain(schedule, k, **kw)
    r = simulate(gg, cl, FixedCost([1.0, 1.0]), st, TC)
    return r.peak_memory_gb["m0/0"] * 1e9, r.peak_memory_gb["m0/1"] * 1e9


@pytest.mark.parametrize("schedule, k, held0, held1", [
    # micro-batches held at once by stage 0 and stage 1 (2 stages, 4 micro-batches):
    ("gpipe", 1, 4, 4),  # all forwards before any backward
    ("1f1b", 1, 2, 1),  # S - s: stage 0 warms up with one forward, stage 1 with none
    ("kfkb", 2, 4, 2),  # units of 2: stage 0 runs F0 F1 | F2 F3 B0 B1 | B2 B3, stage 1 F0 F1 B0 B1 ...
])
def test_activation_memory_is_micro_batches_in_flight(schedule, k, held0, held1):
    # only saved activations: 2 rows x 1e6 bytes = 2e6 bytes per micro-batch on device 0, 2 x 5e5 = 1e6 on
    # device 1; the peak is the count held at once times that
    p0, p1 = _peaks(schedule, k)
    assert p0 == pytest.approx(held0 * 2e6) and p1 == pytest.approx(held1 * 1e6)
    assert held0 == max_in_flight(stage_order(schedule, k, 2, 0, 4))
    assert held1 == max_in_flight(stage_order(schedule, k, 2, 1, 4))


def test_gpipe_holds_what_the_whole_batch_holds_without_pipelining():
    gg, cl, st = _chain("gpipe")
    plain = simulate(gg, cl, FixedCost([1.0, 1.0]), Strategy(st.decisions), TC)
    assert plain.peak_memory_gb["m0/0"] * 1e9 == pytest.approx(8e6)  # 8 rows x 1e6
    assert _peaks("gpipe")[0] == pytest.approx(8e6)


GROUPS = [dict(param_bytes=4000, param_count=1000, saved_bytes_per_row=1000, out_bytes_per_row=300),
          dict(param_bytes=2000, param_count=500, saved_bytes_per_row=700)]


def test_1f1b_with_weights_gradients_and_received_slices():
    # micro-batch of 2 rows, edge 200 bytes per row: device 1 receives 400 bytes of activations per micro-batch
    # (kept until its backward), device 0 receives 400 bytes of gradients (transient).
    # device 0: static 4000 + 1000 x 8 (Adam) = 12000. Per micro-batch: saved 2000, outputs 600 while running.
    #   F0: 2000 + 600 = 2600; F1: 4000 + 600 = 4600; B0 (first backward, 2 in flight): 4000 held + 4000 gradient
    #   buffer + 600 output gradient + 400 received = 9000; F2: 2000 + 4000 + 2000 + 600 = 8600; B1: 9000 again.
    #   peak 12000 + 9000 = 21000.
    # device 1: static 2000 + 500 x 8 = 6000. Per micro-batch 1400 saved + 400 received = 1800, one in flight:
    #   B0: 1800 + 2000 gradients + 400 input gradient (sent back) = 4200; F1: 2000 + 1800 = 3800.
    #   peak 6000 + 4200 = 10200.
    # The optimizer steps (Adam's foreach sqrt(v)): 4000 + 4000 and 2000 + 2000, below both.
    # The pipeline runtime also holds every slice it sent (until the passes end) and the receive buffers of the
    # next 2 passes: 400 B each. A sent activation slice shares its storage with the output held until its
    # micro-batch's backward (fp32), so it adds only after that backward. Device 0 (F0 F1 B0 F2 B1 F3 B2 B3) peaks
    # at B2: 2000 held + 7000 as above + 2 sent activation slices of backward-done micro-batches (800) + B3's
    # receive (400) = 10200, and at F3 as well: 2000 + 2600 + 4000 + 800 sent + B2, B3's receives (800) -> 22200.
    # Device 1 (F0 B0 F1 B1 ...) at B2: 4200 + 2 sent gradient slices (800) + F3's receive (400) = 5400 -> 11400.
    p0, p1 = _peaks("1f1b", groups=GROUPS, edge_bytes_per_row=200.0)
    assert p0 == pytest.approx(22200) and p1 == pytest.approx(11400)


def test_gpipe_with_weights_gradients_and_received_slices():
    # device 0: B0 with all 4 in flight: 4 x 2000 + 4000 + 600 + 400 = 13000 -> 25000.
    # device 1: B0 with 4 in flight: 4 x 1800 + 2000 + 400 input gradient = 9600 -> 15600.
    # device 0 also holds B1, B2's receives (800) at B0 (its 4 sent activation slices are the held outputs):
    # 13800 -> 25800.
    p0, p1 = _peaks("gpipe", groups=GROUPS, edge_bytes_per_row=200.0)
    assert p0 == pytest.approx(25800) and p1 == pytest.approx(15600)


def _brute_force_peaks(gg, cl, st):
    """Walk every device's program (from the task graph: kind and group per task; a pass is a run of forwards in
    ascending or backwards in descending group order) holding each micro-batch's saved activations and received
    slices from its forward to its backward, a group's gradient buffer from its first backward on, the transients
    of the running task (a backward's output and input gradients; the optimizer step's sqrt(v) of every weight,
    Adam's foreach), every slice sent by an earlier pass, and the receive buffers of the next two passes. Received
    and sent bytes from `slices` on the micro row maps."""
    m = st.pipeline.micro_batches
    tg = build_task_graph(sim_context(gg, cl, FixedCost([1.0] * gg.n_groups), TC), st)
    n_dev = len(cl.devices)
    mrows = [[r // m for r in dc.rows] for dc in st.decisions]
    recv_f = [[0.0] * n_dev for _ in mrows]
    recv_b = [[0.0] * n_dev for _ in mrows]
    for e in gg.edges:
        for sl in slices(tuple(mrows[e.src]), tuple(mrows[e.dst])):
            recv_f[e.dst][sl.dst] += sl.rows * e.bytes_per_row
            recv_b[e.src][sl.src] += sl.rows * e.bytes_per_row
    in_row = [sum(e.bytes_per_row for e in gg.edges if e.dst == g) for g in range(gg.n_groups)]
    out = []
    for d in range(n_dev):
        gs = gg.groups
        static = sum(gs[g].param_bytes + 8 * gs[g].param_count for g in range(len(gs)) if mrows[g][d] > 0)
        bucketed = {g for g in range(len(gs)) if sum(1 for r in mrows[g] if r > 0) > 1}  # gradients in a bucket
        static += sum(gs[g].param_bytes for g in bucketed if mrows[g][d] > 0)  # for good
        tasks = [(tg.tasks.kind[k].value, tg.tasks.group[k]) for k in tg.programs[d]]
        passes: list[list[tuple[str, int]]] = []  # runs of compute tasks: one micro-batch's pass each
        for kind, g in tasks:
            if kind not in ("fwd", "bwd"):
                continue
            last = passes[-1][-1] if passes else None
            if last is not None and last[0] == kind and (g > last[1] if kind == "fwd" else g < last[1]):
                passes[-1].append((kind, g))
            else:
                passes.append([(kind, g)])
        # what a pass receives (posted ahead) and sends (held until the passes end): fwd receives activations and
        # sends them on (its producers' consumers receive them); bwd receives output gradients, sends input ones
        got = [sum((recv_f if p[0][0] == "fwd" else recv_b)[g][d] for _, g in p) for p in passes]
        sent = [sum((recv_b if p[0][0] == "fwd" else recv_f)[g][d] for _, g in p) for p in passes]
        # a sent activation slice is the output the forward holds (fp32) until its micro-batch's backward pass
        # (micro-batches pass in order); a backward pass keeps its groups' outputs, input leaves and their
        # gradients until it ends (the last one through the step)
        fsent = [x for q, x in zip(passes, sent) if q[0][0] == "fwd"]
        live, peak, has_grad, linger = 0.0, 0.0, set(), 0.0
        for i, p in enumerate(passes):
            bwd_done = [x for q, x in zip(passes[:i], sent[:i]) if q[0][0] == "bwd"]
            extra = sum(fsent[:len(bwd_done)]) + sum(bwd_done) + sum(got[i + 1: i + 3])
            if p[0][0] == "bwd":
                linger = 0.0
            for kind, g in p:
                r = mrows[g][d]
                saved = gs[g].saved_bytes_per_row * r + gs[g].saved_bytes_fixed + recv_f[g][d]
                if kind == "fwd":
                    live += saved
                    peak = max(peak, live + gs[g].out_bytes_per_row * r + extra)
                else:
                    if g not in has_grad:
                        has_grad.add(g)
                        live += 0 if g in bucketed else gs[g].param_bytes
                    peak = max(peak, live + linger + (gs[g].out_bytes_per_row + in_row[g]) * r + recv_b[g][d]
                               + extra)
                    live -= saved
                    linger += (gs[g].out_bytes_per_row + in_row[g]) * r + recv_f[g][d]
        step = sum(gs[g].param_bytes for g in range(len(gs)) if mrows[g][d] > 0)  # Adam's foreach sqrt(v)
        peak = max(peak, live + step + linger)  # the step
        out.append(static + peak)
    return out


def test_peak_equals_brute_force_walk_on_random_pipelines():
    rng = random.Random(7)
    for trial in range(40):
        n_st = rng.choice([2, 3])
        per_stage = [rng.choice([1, 2]) for _ in range(n_st)]  # groups per stage
        n_grp = sum(per_stage)
        devs_per_stage = [rng.choice([1, 2]) for _ in range(n_st)]
        n_dev = sum(devs_per_stage)
        cl = make_cluster([n_dev])
        groups = [dict(param_bytes=rng.choice([0, 400, 4000]), saved_bytes_per_row=rng.uniform(0, 1000),
                       saved_bytes_fixed=rng.choice([0.0, 50.0]), out_bytes_per_row=rng.uniform(0, 500))
                  for _ in range(n_grp)]
        for g in groups:
            g["param_count"] = int(g["param_bytes"] // 4)
        edges = [(g, g + 1, rng.uniform(0, 300), 0.0) for g in range(n_grp - 1)]
        if n_grp > 2:
            edges.append((0, n_grp - 1, rng.uniform(0, 300), 0.0))  # a skip edge across stages
        gg = make_gg(groups, edges)
        m = rng.choice([2, 4, 8])
        schedule = rng.choice(["gpipe", "1f1b", "kfkb"])
        k = rng.choice([d for d in (1, 2, 4) if m % d == 0]) if schedule == "kfkb" else 1
        stages, decs, g0, d0 = [], [], 0, 0
        for s in range(n_st):
            devs = tuple(range(d0, d0 + devs_per_stage[s]))
            gids = tuple(range(g0, g0 + per_stage[s]))
            stages.append(Stage(gids, devs))
            for _ in gids:
                rows = [0] * n_dev
                for d in devs:
                    rows[d] = m * rng.choice([1, 2, 3])
                rows[devs[0]] += m * 12 - sum(rows)  # batch 12 m
                if rows[devs[0]] <= 0:
                    rows = [0] * n_dev
                    rows[devs[0]] = 12 * m
                decs.append(Decision(tuple(rows)))
            g0 += per_stage[s]
            d0 += devs_per_stage[s]
        st = Strategy(tuple(decs), pipeline=Pipeline(tuple(stages), m, schedule, k))
        r = simulate(gg, cl, FixedCost([1.0] * n_grp), st, TC)
        want = _brute_force_peaks(gg, cl, st)
        got = [r.peak_memory_gb[d.id] * 1e9 for d in cl.devices]
        assert got == pytest.approx(want, rel=1e-12), (trial, schedule, k, m)
