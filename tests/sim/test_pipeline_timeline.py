"""The micro-batched pipeline timeline against start times worked out by hand (issue 21, must-show 3).

The chain: group 0 on device 0 (stage 0) -> group 1 on device 1 (stage 1), global batch 4 in m = 4 micro-batches
of 1 row; FixedCost 1 ms per row forward and 2 ms backward, so every forward lasts 1 ms and every backward 2 ms.
Device latency 0: with 0 bytes per row the activation and gradient messages arrive when sent ("free links"); with
1e7 bytes per row on the 80 Gbit/s = 1e7 bytes/ms device links each one takes exactly 1 ms (activations go
0 -> 1 and gradients 1 -> 0: opposite directions never share bandwidth, and consecutive ones never overlap).
"""

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim import estimate, simulate
from tag.sim.build import build_task_graph
from tag.sim.context import sim_context
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.pipeline import Pipeline, Stage, stage_order

TC = TrainingConfig(optimizer="adam")
LINK_BYTES_PER_ROW = 1e7  # 1 ms per 1-row micro-batch on a 1e7 bytes/ms link


def _chain(schedule, k=1, bytes_per_row=0.0, upd=(0.0, 0.0)):
    cl = make_cluster([2], dev_lat_us=0.0)
    gg = make_gg([dict(param_bytes=40, param_count=10), dict(param_bytes=40, param_count=10)],
                 [(0, 1, bytes_per_row, 0.0)])
    pl = Pipeline((Stage((0,), (0,)), Stage((1,), (1,))), 4, schedule, k)
    st = Strategy((Decision((4, 0)), Decision((0, 4))), pipeline=pl)
    return gg, cl, FixedCost([1.0, 1.0], list(upd)), st


def _starts(result, device):
    """[(name without op names, start ms)] of the device's compute tasks in start order."""
    ev = [e for e in result.trace_events if e["ph"] == "X" and e["pid"] == 0 and e["tid"] == device]
    ev.sort(key=lambda e: e["ts"])
    return [(" ".join(e["name"].split()[:3]) if e["cat"] != "update" else "update", e["ts"] / 1e3) for e in ev]


def _run(schedule, k=1, bytes_per_row=0.0, upd=(0.0, 0.0)):
    gg, cl, cost, st = _chain(schedule, k, bytes_per_row, upd)
    traced = simulate(gg, cl, cost, st, TC, trace=True)
    fused = simulate(gg, cl, cost, st, TC)
    assert fused.iteration_ms == traced.iteration_ms  # the exact reduction (tag.sim.fuse) holds for pipelines
    return traced


def test_gpipe_2_stages_4_micro_batches_free_links():
    # dev0: F0..F3 at 0,1,2,3. dev1: F_j when dev0's F_j ends and its stream is free: 1,2,3,4 (ends 5); then
    # B0..B3 back to back at 5,7,9,11. dev0: B_j when dev1's B_j ends: 7,9,11,13; last ends 15
    # = (m + S - 1) x (1 + 2). Then each device's optimizer step (0.5 ms): dev0 15 -> 15.5.
    r = _run("gpipe", upd=(0.5, 0.5))
    assert _starts(r, 0) == [("fwd g0 mb0", 0), ("fwd g0 mb1", 1), ("fwd g0 mb2", 2), ("fwd g0 mb3", 3),
                             ("bwd g0 mb0", 7), ("bwd g0 mb1", 9), ("bwd g0 mb2", 11), ("bwd g0 mb3", 13),
                             ("update", 15)]
    assert _starts(r, 1) == [("fwd g1 mb0", 1), ("fwd g1 mb1", 2), ("fwd g1 mb2", 3), ("fwd g1 mb3", 4),
                             ("bwd g1 mb0", 5), ("bwd g1 mb1", 7), ("bwd g1 mb2", 9), ("bwd g1 mb3", 11),
                             ("update", 13)]
    assert r.iteration_ms == pytest.approx(15.5)
    # busy: 4 x (1 + 2) + 0.5 on each device; the rest of 15.5 (or 13.5) is the bubble
    assert r.busy_ms["m0/0"] == pytest.approx(12.5) and r.busy_ms["m0/1"] == pytest.approx(12.5)


def test_1f1b_2_stages_4_micro_batches_free_links():
    # stage 0 order F0 F1 B0 F2 B1 F3 B2 B3, stage 1 F0 B0 F1 B1 F2 B2 F3 B3.
    # dev0 F0 0-1, F1 1-2. dev1 F0 1-2, B0 2-4, F1 (arrived 2) 4-5, B1 5-7.
    # dev0 B0 waits for dev1's B0 (4): 4-6, F2 6-7, B1 waits for 7: 7-9, F3 9-10.
    # dev1 F2 (arrived 7) 7-8, B2 8-10, F3 (arrived 10) 10-11, B3 11-13.
    # dev0 B2 (ready 10) 10-12, B3 waits for 13: 13-15.
    r = _run("1f1b")
    assert _starts(r, 0) == [("fwd g0 mb0", 0), ("fwd g0 mb1", 1), ("bwd g0 mb0", 4), ("fwd g0 mb2", 6),
                             ("bwd g0 mb1", 7), ("fwd g0 mb3", 9), ("bwd g0 mb2", 10), ("bwd g0 mb3", 13),
                             ("update", 15)]
    assert _starts(r, 1) == [("fwd g1 mb0", 1), ("bwd g1 mb0", 2), ("fwd g1 mb1", 4), ("bwd g1 mb1", 5),
                             ("fwd g1 mb2", 7), ("bwd g1 mb2", 8), ("fwd g1 mb3", 10), ("bwd g1 mb3", 11),
                             ("update", 13)]
    assert r.iteration_ms == pytest.approx(15.0)


def test_kfkb_k2_2_stages_4_micro_batches_free_links():
    # k = 2: units {0, 1}, {2, 3}. stage 0 (one warm-up unit): F0 F1 | F2 F3 B0 B1 | B2 B3;
    # stage 1: F0 F1 B0 B1 F2 F3 B2 B3.
    # dev0 F0..F3 at 0..3. dev1 F0 1-2, F1 2-3, B0 3-5, B1 5-7, F2 (arrived 3) 7-8, F3 8-9, B2 9-11, B3 11-13.
    # dev0 B0 (ready 5) 5-7, B1 (ready 7) 7-9, B2 (ready 11) 11-13, B3 (ready 13) 13-15.
    r = _run("kfkb", k=2)
    assert _starts(r, 0) == [("fwd g0 mb0", 0), ("fwd g0 mb1", 1), ("fwd g0 mb2", 2), ("fwd g0 mb3", 3),
                             ("bwd g0 mb0", 5), ("bwd g0 mb1", 7), ("bwd g0 mb2", 11), ("bwd g0 mb3", 13),
                             ("update", 15)]
    assert _starts(r, 1) == [("fwd g1 mb0", 1), ("fwd g1 mb1", 2), ("bwd g1 mb0", 3), ("bwd g1 mb1", 5),
                             ("fwd g1 mb2", 7), ("fwd g1 mb3", 8), ("bwd g1 mb2", 9), ("bwd g1 mb3", 11),
                             ("update", 13)]
    assert r.iteration_ms == pytest.approx(15.0)


def test_gpipe_with_1ms_links():
    # every activation / gradient takes 1 ms. dev0 F0..F3 at 0..3; activations arrive 2,3,4,5.
    # dev1 F_j at 2,3,4,5, B0..B3 at 6,8,10,12 (ends 8,10,12,14); gradients arrive 9,11,13,15.
    # dev0 B_j at 9,11,13,15; ends 17.
    r = _run("gpipe", bytes_per_row=LINK_BYTES_PER_ROW)
    assert [t for _, t in _starts(r, 0)] == [0, 1, 2, 3, 9, 11, 13, 15, 17]
    assert [t for _, t in _starts(r, 1)] == [2, 3, 4, 5, 6, 8, 10, 12, 14]
    assert r.iteration_ms == pytest.approx(17.0)
    # 4 activations of 1e7 bytes one way, 4 gradients the other
    assert r.link_bytes["m0/0->m0"] == pytest.approx(4e7) and r.link_bytes["m0/1->m0"] == pytest.approx(4e7)


def test_1f1b_with_1ms_links():
    # dev0 F0 0-1, F1 1-2 (arrive 2, 3). dev1 F0 2-3, B0 3-5 (grad arrives 6), F1 5-6, B1 6-8 (grad 9).
    # dev0 B0 6-8, F2 8-9 (arrives 10), B1 9-11, F3 11-12 (arrives 13).
    # dev1 F2 10-11, B2 11-13 (grad 14), F3 13-14, B3 14-16 (grad 17). dev0 B2 14-16, B3 17-19.
    r = _run("1f1b", bytes_per_row=LINK_BYTES_PER_ROW)
    assert [t for _, t in _starts(r, 0)] == [0, 1, 6, 8, 9, 11, 14, 17, 19]
    assert [t for _, t in _starts(r, 1)] == [2, 3, 5, 6, 10, 11, 13, 14, 16]
    assert r.iteration_ms == pytest.approx(19.0)


def test_kfkb_k2_with_1ms_links():
    # dev0 F0..F3 0..4 (arrive 2,3,4,5). dev1 F0 2-3, F1 3-4, B0 4-6 (grad 7), B1 6-8 (grad 9), F2 8-9, F3 9-10,
    # B2 10-12 (grad 13), B3 12-14 (grad 15). dev0 B0 7-9, B1 9-11, B2 13-15, B3 15-17.
    r = _run("kfkb", k=2, bytes_per_row=LINK_BYTES_PER_ROW)
    assert [t for _, t in _starts(r, 0)] == [0, 1, 2, 3, 7, 9, 13, 15, 17]
    assert [t for _, t in _starts(r, 1)] == [2, 3, 4, 6, 8, 9, 10, 12, 14]
    assert r.iteration_ms == pytest.approx(17.0)


def test_bubbles_are_idle_events():
    # 1F1B, free links: dev0 waits 2-4 (for B0's gradient) and 12-13 (for B3's); dev1 waits 0-1 (for F0).
    r = _run("1f1b")
    idle = sorted((e["tid"], e["ts"] / 1e3, e["dur"] / 1e3) for e in r.trace_events
                  if e["ph"] == "X" and e["pid"] == 2)
    assert idle == [(0, 2.0, 2.0), (0, 12.0, 1.0), (1, 0.0, 1.0)]


def test_critical_path_estimate_matches_on_free_links():
    # with nothing shared on the links the one-pass estimate walks the same start times (tasks are numbered so
    # that producers come first): the last backward ends at 15 for every schedule, then the 0.5 ms step
    for schedule, k in (("gpipe", 1), ("1f1b", 1), ("kfkb", 2)):
        gg, cl, cost, st = _chain(schedule, k, upd=(0.5, 0.5))
        assert estimate(gg, cl, cost, st, TC).iteration_ms == pytest.approx(15.5)


def _sync_case(nbytes):
    # group 0 on device 0 (stage 0, 4 rows), group 1 split 2 + 2 over devices 1 and 2 (stage 1) with `nbytes` of
    # parameters; m = 2 micro-batches: group 0 runs 2 rows (FixedCost 0.5 ms/row: forward 1, backward 2), group 1
    # 1 row per device (1 ms/row: forward 1, backward 2). Free links; optimizer steps 0.5 ms.
    cl = make_cluster([3], dev_lat_us=0.0)
    gg = make_gg([dict(param_bytes=40, param_count=10), dict(param_bytes=nbytes, param_count=int(nbytes // 4))],
                 [(0, 1, 0.0, 0.0)])
    pl = Pipeline((Stage((0,), (0,)), Stage((1,), (1, 2))), 2, "1f1b")
    st = Strategy((Decision((4, 0, 0)), Decision((0, 2, 2), "ring")), pipeline=pl)
    return gg, cl, FixedCost([0.5, 1.0], [0.5, 0.5]), st


def test_sync_waits_for_the_last_micro_batch_and_overlaps_the_drain():
    # stage 0: F0 F1 B0 B1; stage 1: F0 B0 F1 B1.
    # dev0 F0 0-1, F1 1-2. devs 1, 2: F0 1-2, B0 2-4, F1 4-5, B1 5-7. dev0 B0 (ready 4) 4-6, B1 (ready 7) 7-9.
    # group 1's ring over devices 1, 2: 2 (n-1)/n x 4e7 bytes / 1e7 bytes/ms = 4 ms, from stage 1's last backward
    # (7) to 11, while device 0 drains (7-9). Steps: dev0 9-9.5, devs 1, 2 after the sync 11-11.5.
    gg, cl, cost, st = _sync_case(4e7)
    r = simulate(gg, cl, cost, st, TC, trace=True)
    sync = [e for e in r.trace_events if e["ph"] == "X" and e["pid"] == 1 and e["name"].startswith("sync")]
    assert sync and min(e["ts"] for e in sync) / 1e3 == pytest.approx(7.0)
    assert max(e["ts"] + e["dur"] for e in sync) / 1e3 == pytest.approx(11.0)
    assert dict(_starts(r, 0))["update"] == pytest.approx(9.0)
    assert dict(_starts(r, 1))["update"] == pytest.approx(11.0)
    assert r.iteration_ms == pytest.approx(11.5)
    # the deploy runtime's order (a sync after its devices' whole backward) is the same here: stage 1's last
    # backward is its devices' last task
    assert simulate(gg, cl, cost, st, TC, overlap_sync=False).iteration_ms == pytest.approx(11.5)


def test_sync_units_wait_on_last_micro_batch_backwards():
    # the task graph itself: group 1's sync waits for exactly its two micro-batch-1 backward tasks
    gg, cl, cost, st = _sync_case(4e7)
    tg = build_task_graph(sim_context(gg, cl, cost, TC), st)
    (u,) = tg.syncs
    assert u.groups == (1,) and u.devices == (1, 2)
    assert sorted((tg.tasks.device[k], tg.micro_batch[k], tg.tasks.kind[k].value) for k in u.wait) == \
        [(1, 1, "bwd"), (2, 1, "bwd")]


def test_one_stage_one_micro_batch_equals_no_pipeline():
    # a second method: a pipeline of one stage and m = 1 is the plain iteration, to the last bit
    cl = make_cluster([2])
    gg = make_gg([dict(param_bytes=4e6, param_count=1_000_000, saved_bytes_per_row=100.0, out_bytes_per_row=8.0),
                  dict(param_bytes=1e6, param_count=250_000, saved_bytes_per_row=50.0)], [(0, 1, 1e5, 0.0)])
    decs = (Decision((4, 4), "ring"), Decision((2, 6), "ring"))
    plain = Strategy(decs)
    piped = Strategy(decs, pipeline=Pipeline((Stage((0, 1), (0, 1)),), 1, "1f1b"))
    cost = FixedCost([1.0, 0.5], [0.1, 0.1])
    a, b = simulate(gg, cl, cost, plain, TC), simulate(gg, cl, cost, piped, TC)
    assert a.iteration_ms == b.iteration_ms and a.peak_memory_gb == b.peak_memory_gb
    assert a.link_bytes == b.link_bytes and a.busy_ms == b.busy_ms


@pytest.mark.parametrize("bad, message", [
    (Pipeline((Stage((0,), (0,)),), 4, "1f1b"), "group 1 is in no pipeline stage"),
    (Pipeline((Stage((1,), (1,)), Stage((0,), (0,))), 4, "1f1b"), "edge g0->g1 goes from stage 1 back to stage 0"),
    (Pipeline((Stage((0,), (1,)), Stage((1,), (1,))), 4, "1f1b"), "group 0 has rows on device 0"),
    (Pipeline((Stage((0,), (0,)), Stage((1,), (1,))), 3, "1f1b"), "not a multiple of 3 micro-batches"),
])
def test_pipeline_that_does_not_fit_is_an_error(bad, message):
    gg, cl, cost, st = _chain("1f1b")
    with pytest.raises(ValueError, match=message):
        simulate(gg, cl, cost, Strategy(st.decisions, pipeline=bad), TC)


def _recurrence_starts(schedule, k, n_st, m, fwd_ms):
    """Start of every pass by the pipeline recurrence (a second method, no event loop): a pass starts when the
    previous pass of its stage has ended and, for ("F", j), stage s - 1's forward of j, for ("B", j), stage
    s + 1's backward of j (free links). Solved by sweeping until nothing changes. {(stage, kind, j): start}."""
    orders = [stage_order(schedule, k, n_st, s, m) for s in range(n_st)]
    dur = lambda s, kind: fwd_ms[s] * (1 if kind == "F" else 2)  # noqa: E731 - FixedCost: backward = 2 x forward
    end: dict = {}
    start: dict = {}
    for _ in range(4 * m * n_st):  # each sweep settles at least one more pass
        if len(end) == sum(map(len, orders)):
            break
        for s, order in enumerate(orders):
            t = 0.0
            for kind, j in order:
                dep = (s - 1, "F", j) if kind == "F" and s > 0 else (s + 1, "B", j) if kind == "B" and s < n_st - 1 \
                    else None
                if dep is not None and dep not in end:
                    break
                t = max(t, end[dep] if dep is not None else 0.0)
                start[(s, kind, j)] = t
                t = end[(s, kind, j)] = t + dur(s, kind)
    assert len(end) == sum(map(len, orders)), "the recurrence did not settle"
    return start


@pytest.mark.parametrize("n_st, m, schedule, k", [(3, 6, "gpipe", 1), (3, 6, "1f1b", 1), (3, 6, "kfkb", 2),
                                                   (4, 8, "1f1b", 1), (4, 8, "kfkb", 4), (2, 6, "kfkb", 3)])
def test_timeline_matches_the_pipeline_recurrence(n_st, m, schedule, k):
    # one group per stage on its own device, uneven stage speeds, free links: every task's start equals the
    # recurrence's; the iteration ends with the last backward
    fwd_ms = [1.0, 2.5, 0.5, 1.5][:n_st]
    cl = make_cluster([n_st], dev_lat_us=0.0)
    gg = make_gg([dict() for _ in range(n_st)], [(s, s + 1, 0.0, 0.0) for s in range(n_st - 1)])
    decs = tuple(Decision(tuple(m if d == s else 0 for d in range(n_st))) for s in range(n_st))
    pl = Pipeline(tuple(Stage((s,), (s,)) for s in range(n_st)), m, schedule, k)
    r = simulate(gg, cl, FixedCost(fwd_ms), Strategy(decs, pipeline=pl), TC, trace=True)
    want = _recurrence_starts(schedule, k, n_st, m, fwd_ms)
    got = {}
    for e in r.trace_events:
        if e["ph"] == "X" and e["pid"] == 0:
            kind, _, mb = e["name"].split()[:3]
            got[(e["tid"], "F" if kind == "fwd" else "B", int(mb[2:]))] = e["ts"] / 1e3
    assert got == pytest.approx(want)
    assert r.iteration_ms == pytest.approx(max(t + 2 * fwd_ms[s] for (s, kind, _), t in want.items() if kind == "B"))
