"""The rank-level plan of pipelined strategies (pure, no ranks): micro-batch transfers worked out by hand on the toy
model, message tags, ranks hosting several devices, refusals, and a replay of the runtime's message protocol that
shows every schedule completes (no deadlock) with every message received exactly once."""

from __future__ import annotations

import pytest

from tag.deploy.pipeline_schedule import TAG_LIMIT, micro_strategy, rank_stages
from tag.deploy.schedule import Transfer, build_schedule, device_ranks
from tag.deploy.train import data_span
from tag.errors import InputError
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage, stage_order
from _deploy_toy import TOY_GROUPS, toy_graph

MACHINES = ["m0", "m0", "m1"]


def D(rows, sync=None, sfb=()):
    return Decision(tuple(rows), sync, None, tuple(sfb))


def two_stage(schedule="1f1b", k=1, m=4):
    """Toy groups 0-1 on devices 0, 1 (rows 12:4, i.e. 3:1 per micro-batch), groups 2-3 on device 2."""
    decs = [D((12, 4, 0), "ring")] * 2 + [D((0, 0, 16))] * 2
    return Strategy(tuple(decs), pipeline=Pipeline((Stage((0, 1), (0, 1)), Stage((2, 3), (2,))), m, schedule, k))


def three_stage(schedule="1f1b", k=1, m=4):
    decs = [D((16, 0, 0)), D((0, 16, 0)), D((0, 16, 0)), D((0, 0, 16))]
    stages = (Stage((0,), (0,)), Stage((1, 2), (1,)), Stage((3,), (2,)))
    return Strategy(tuple(decs), pipeline=Pipeline(stages, m, schedule, k))


def test_micro_batch_transfers_by_hand():
    s = build_schedule(toy_graph(16), TOY_GROUPS, two_stage(), MACHINES)
    assert s.batch_size == 16  # losses are shares of the global batch
    assert s.rank_rows == [(3, 1, 0), (3, 1, 0), (0, 0, 4), (0, 0, 4)]
    # group 2 (g3, add) reads a2 (group 1), W3t (group 0, unbatched: from group 0's first rank) and a1 (group 0):
    # micro rows (3, 1, 0) -> (0, 0, 4) move rows 0-2 from rank 0 and row 3 from rank 1
    assert s.transfers[2] == [Transfer("a2", 1, 0, 2, 0, 3), Transfer("a2", 1, 1, 2, 3, 1),
                              Transfer("W3t", 0, 0, 2, 0, 0),
                              Transfer("a1", 0, 0, 2, 0, 3), Transfer("a1", 0, 1, 2, 3, 1)]
    assert s.transfers[3] == [Transfer("a2", 1, 0, 2, 0, 3), Transfer("a2", 1, 1, 2, 3, 1)]  # s stays on rank 2
    assert s.transfers[0] == s.transfers[1] == []
    p = s.pipeline
    assert (p.micro_batches, p.micro_batch_rows, p.rank_stage) == (4, 4, (0, 0, 1))
    assert p.sends_of == (((2, 2), (2, 3), (2, 4)), ((2, 0), (2, 1), (3, 0), (3, 1)), (), ())
    assert (p.n_transfers, p.transfer_base) == (7, (0, 0, 0, 5))
    assert p.orders[0] == p.orders[1] == tuple(stage_order("1f1b", 1, 2, 0, 4))
    assert p.orders[2] == (("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3))
    # the 3:1 stage's gradients sync over ranks 0 and 1 (group 0: b1 and W3, whose Transpose it runs; group 1: W2);
    # the tied W1 (groups 0 and 3) over all three ranks
    assert sorted((b.ranks, b.params) for b in s.buckets) == [((0, 1), ("W2",)), ((0, 1), ("b1", "W3")),
                                                              ((0, 1, 2), ("W1",))]


@pytest.mark.parametrize("make", [two_stage, three_stage])
def test_tags_distinct_and_below_the_collectives(make):
    s = build_schedule(toy_graph(16), TOY_GROUPS, make("kfkb", 2, 4), MACHINES)
    p = s.pipeline
    tags = [p.tag(j, b, c, k) for j in range(4) for b in (False, True)
            for c, lst in enumerate(s.transfers) for k in range(len(lst))]
    assert len(tags) == len(set(tags)) == 2 * 4 * p.n_transfers
    assert sorted(tags) == list(range(len(tags))) and max(tags) < TAG_LIMIT
    # sends_of lists every transfer once, under its producer group
    flat = sorted((c, k) for lst in p.sends_of for c, k in lst)
    assert flat == sorted((c, k) for c, lst in enumerate(s.transfers) for k in range(len(lst)))
    assert all(s.transfers[c][k].producer_group == g for g, lst in enumerate(p.sends_of) for c, k in lst)


def _replay(s, orders=None) -> tuple[bool, int]:
    """Run the runtime's message protocol on paper (PipelineRankRuntime): for each pass, each group the rank has rows
    in first waits for its messages (F: its inputs from other ranks; B: the gradients of the outputs it sent), then
    posts its own (F: outputs to consumers; B: input gradients to producers). Ranks advance round robin until all
    are done or none can move. Returns (completed, messages) and checks each message is received exactly once."""
    p = s.pipeline
    orders = orders or p.orders
    n = s.n_ranks
    steps = []  # per rank: [(needs, posts)] per (pass, group)
    for r in range(n):
        mine = [g for g in p.rank_groups(r) if s.rank_rows[g][r] > 0]
        lst = []
        for kind, j in orders[r]:
            for g in (mine if kind == "F" else reversed(mine)):
                if kind == "F":
                    needs = {(j, "F", g, k) for k, tr in enumerate(s.transfers[g]) if tr.dst == r}
                    posts = {(j, "F", c, k) for c, k in p.sends_of[g] if s.transfers[c][k].src == r}
                else:
                    needs = {(j, "B", c, k) for c, k in p.sends_of[g] if s.transfers[c][k].src == r}
                    posts = {(j, "B", g, k) for k, tr in enumerate(s.transfers[g]) if tr.dst == r}
                lst.append((needs, posts))
        steps.append(lst)
    posted, received, pos = set(), [], [0] * n
    moved = True
    while moved:
        moved = False
        for r in range(n):
            while pos[r] < len(steps[r]) and steps[r][pos[r]][0] <= posted:
                needs, posts = steps[r][pos[r]]
                received += needs
                assert not posts & posted  # no message is posted twice
                posted |= posts
                pos[r] += 1
                moved = True
    done = all(pos[r] == len(steps[r]) for r in range(n))
    if done:
        assert sorted(received) == sorted(posted)  # every message sent is received, once
    return done, len(posted)


@pytest.mark.parametrize("schedule,k", [("gpipe", 1), ("1f1b", 1), ("kfkb", 2), ("kfkb", 4)])
@pytest.mark.parametrize("make", [two_stage, three_stage])
def test_every_schedule_completes_without_deadlock(schedule, k, make):
    s = build_schedule(toy_graph(16), TOY_GROUPS, make(schedule, k, 4), MACHINES)
    done, messages = _replay(s)
    assert done
    # forward and backward of every float transfer (all of the toy's), for each of the 4 micro-batches
    assert messages == 2 * 4 * s.pipeline.n_transfers


def test_replay_detects_a_deadlock():
    """The same replay reports an order that cannot finish: the first stage waiting for micro-batch 0's gradients
    before it has sent micro-batch 0 forward."""
    s = build_schedule(toy_graph(16), TOY_GROUPS, three_stage(), MACHINES)
    orders = list(s.pipeline.orders)
    orders[0] = (("B", 0),) + tuple(p for p in orders[0] if p != ("B", 0))
    assert _replay(s, tuple(orders))[0] is False


def test_ranks_hosting_several_devices():
    """4 devices on 2 or 3 ranks: each rank runs the one stage its devices are in, with their rows summed."""
    decs = [D((8, 8, 0, 0), "ring")] * 2 + [D((0, 0, 4, 12), "ring")] * 2
    pipe = Pipeline((Stage((0, 1), (0, 1)), Stage((2, 3), (2, 3))), 4, "gpipe")
    s = build_schedule(toy_graph(16), TOY_GROUPS, Strategy(tuple(decs), pipeline=pipe), ["m0"] * 4, nproc=2)
    assert s.pipeline.rank_stage == (0, 1)
    assert s.rank_rows == [(4, 0), (4, 0), (0, 4), (0, 4)]
    assert rank_stages(pipe, device_ranks(4, 3), 3, decs) == (0, 1, 1)
    # stages {0} and {1, 2, 3}: only one device per rank keeps every rank in one stage
    bad = Pipeline((Stage((0, 1), (0,)), Stage((2, 3), (1, 2, 3))), 4)
    decs2 = [D((16, 0, 0, 0))] * 2 + [D((0, 4, 4, 8))] * 2
    with pytest.raises(InputError) as e:
        build_schedule(toy_graph(16), TOY_GROUPS, Strategy(tuple(decs2), pipeline=bad), ["m0"] * 4, nproc=2)
    assert str(e.value) == ("--nproc: 2: expected a rank count whose ranks each host devices of one pipeline stage "
                            "(here: 4), found rank 0 would host devices of stages[0] and stages[1]")


def test_refusals_name_the_plan_path():
    graph = toy_graph(16)
    odd = Strategy((D((10, 6, 0), "ring"),) * 2 + (D((0, 0, 16)),) * 2,
                   pipeline=Pipeline((Stage((0, 1), (0, 1)), Stage((2, 3), (2,))), 4))
    with pytest.raises(InputError, match=r"^p.json: decisions\[0\].rows: expected row counts that are multiples of "
                                         r"micro_batches 4 .*, found 10$"):
        micro_strategy(odd, "p.json")
    off_stage = Strategy((D((12, 4, 0), "ring"),) * 2 + (D((0, 8, 8), "ring"),) * 2,
                         pipeline=Pipeline((Stage((0, 1), (0, 1)), Stage((2, 3), (2,))), 4))
    with pytest.raises(InputError, match=r"decisions\[2\].rows: expected rows only on the devices of stages\[1\]"):
        build_schedule(graph, TOY_GROUPS, off_stage, MACHINES, plan_file="p.json")
    sfb = Strategy((D((12, 4, 0), "ring", sfb=["g1"]),) + (D((12, 4, 0), "ring"),) + (D((0, 0, 16)),) * 2,
                   pipeline=Pipeline((Stage((0, 1), (0, 1)), Stage((2, 3), (2,))), 4))
    with pytest.raises(InputError, match=r"^p.json: decisions\[0\].sfb: expected no SFB ops in a pipelined plan"):
        build_schedule(graph, TOY_GROUPS, sfb, MACHINES, plan_file="p.json")


def test_data_span_covers_every_micro_batch():
    """Group 0 reads x: rank 0 has micro rows [0, 3), rank 1 row 3, of each 4-row micro-batch; rank 2 makes the outputs
    (y, y2) on all 4 rows."""
    s = build_schedule(toy_graph(16), TOY_GROUPS, two_stage(), MACHINES)
    assert [data_span(s, r, "y") for r in range(3)] == [(0, 15), (3, 16), (0, 16)]


def test_module_api_refuses_a_pipelined_plan():
    """tag.runtime's nn.Module path reads one row map for the whole batch; a pipelined schedule's rows are one
    micro-batch's, so it refuses (even a 1-stage pipeline whose groups share one row map)."""
    from types import SimpleNamespace

    from tag.runtime.plan import RankPlan

    decs = (D((12, 4, 0), "ring"),) * 4
    one_stage = Strategy(decs, pipeline=Pipeline((Stage((0, 1, 2, 3), (0, 1)),), 4))
    s = build_schedule(toy_graph(16), TOY_GROUPS, one_stage, MACHINES)
    plan = RankPlan(SimpleNamespace(plan_path="p.json"), s, 0, 3, "cpu")
    with pytest.raises(InputError, match=r"^p.json: stages: expected a plan without stages to train an nn.Module"):
        plan.data_parallel_rows()
