"""Simulating ahead on other cores (`tag.search.prefetch`): every answer is fn's, workers really compute some, a
failing or dying worker leaves the work to the asking process, and a plan is the same with and without workers."""

import os

import pytest

from tag.search.prefetch import Prefetcher, can_fork, fork_map

PARENT = os.getpid()

needs_fork = pytest.mark.skipif(not can_fork(), reason="workers are forked on Linux only")


def square_and_pid(x):
    return x * x, os.getpid()


@needs_fork
def test_listed_strategies_alternate_between_this_process_and_the_worker():
    with Prefetcher(square_and_pid, workers=1) as pf:
        pf.ahead(range(8))
        got = [pf.take(x) for x in range(8)]
    assert [v for v, _ in got] == [x * x for x in range(8)]
    # this process computes 0 while the worker computes 1, then 2 here and 3 there, ...
    assert [pid == PARENT for _, pid in got] == [True, False] * 4
    assert pf.from_workers == 4


def test_without_workers_everything_is_computed_here():
    with Prefetcher(square_and_pid, workers=0) as pf:
        pf.ahead(range(4))
        got = [pf.take(x) for x in (3, 1, 2)]
    assert got == [(9, PARENT), (1, PARENT), (4, PARENT)] and pf.workers == 0


@needs_fork
def test_an_unlisted_ask_and_a_changed_list():
    with Prefetcher(square_and_pid, workers=1) as pf:
        pf.ahead([1, 2, 3])
        assert pf.take(1) == (1, PARENT)  # the worker takes 2
        pf.ahead([10, 11])  # the search moved on: 2 is kept, 3 dropped
        assert pf.take(10) == (100, PARENT)
        assert pf.take(11)[0] == 121  # here or there, as the worker is free or still on 2
        value, pid = pf.take(2)
        assert value == 4 and pid != PARENT
        assert pf.take(3) == (9, PARENT) and pf.take(7) == (49, PARENT)  # 3 was never handed out


def fails_on_three(x):
    if x == 3:
        raise ValueError("three")
    return x


def dies_on_two_in_a_worker(x):
    if x == 2 and os.getpid() != PARENT:
        os._exit(1)
    return x, os.getpid()


@needs_fork
def test_a_failure_in_a_worker_is_raised_where_the_search_asks():
    with Prefetcher(fails_on_three, workers=1) as pf:
        pf.ahead([2, 3, 4])
        assert pf.take(2) == 2  # the worker takes 3 and fails
        with pytest.raises(ValueError, match="three"):
            pf.take(3)
        assert pf.take(4) == 4


@needs_fork
def test_a_dead_worker_leaves_the_rest_to_this_process():
    with Prefetcher(dies_on_two_in_a_worker, workers=1) as pf:
        pf.ahead([1, 2, 3, 4])
        assert pf.take(1) == (1, PARENT)  # the worker takes 2 and dies
        assert pf.take(2) == (2, PARENT)
        assert [pf.take(x) for x in (3, 4)] == [(3, PARENT), (4, PARENT)]
        assert pf.workers == 0


@needs_fork
def test_a_plan_is_the_same_with_and_without_workers():
    from tag.modelio import load_inputs
    from tag.search.planner import plan

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    inp = load_inputs(os.path.join(root, "datasets/models/resnet_tiny.onnx"),
                      os.path.join(root, "datasets/topologies/heterog8.json"))
    runs = [plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=20, refine_simulations=60, seed=1,
                 workers=w) for w in (0, 1)]
    a, b = runs
    assert a.strategy == b.strategy and a.simulations == b.simulations and a.playouts == b.playouts
    assert a.result.iteration_ms == b.result.iteration_ms
    assert {k: v for k, v in a.sfb.items() if k != "seconds"} == {k: v for k, v in b.sfb.items() if k != "seconds"}
    assert {n: r.iteration_ms for n, (_, r) in a.baselines.items()} == \
        {n: r.iteration_ms for n, (_, r) in b.baselines.items()}


def test_fork_map_is_the_list_comprehension():
    assert fork_map(square_and_pid, [], workers=1) == []
    got = fork_map(square_and_pid, range(9), workers=1)
    assert [v for v, _ in got] == [x * x for x in range(9)]
    if can_fork():
        assert any(pid != PARENT for _, pid in got)  # shared out
    assert fork_map(square_and_pid, range(3), workers=0) == [(x * x, PARENT) for x in range(3)]


@needs_fork
def test_fork_map_computes_here_what_a_worker_could_not():
    got = fork_map(dies_on_two_in_a_worker, range(5), workers=1)
    assert [v for v, _ in got] == list(range(5))
    with pytest.raises(ValueError, match="three"):
        fork_map(fails_on_three, range(6), workers=1)


@needs_fork
def test_pipeline_candidates_are_the_same_with_a_worker():
    from tag.modelio import load_inputs
    from tag.search.pipeline_search import pipeline_candidates

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    inp = load_inputs(os.path.join(root, "datasets/models/gpt2_tiny.onnx"),
                      os.path.join(root, "datasets/topologies/amp16.json"))
    a, b = (pipeline_candidates(inp.gg, inp.cluster, inp.cost, inp.training, inp.gg.graph.batch_size, workers=w)
            for w in (0, 1))
    assert [(c.name, c.strategy, c.estimate_ms) for c in a] == [(c.name, c.strategy, c.estimate_ms) for c in b]
    assert len(a) > 3


def test_above_the_device_limit_plan_uses_no_worker(monkeypatch):
    """plan() passes workers on only up to WORKERS_MAX_DEVICES devices (heterog8 has 8: a limit of 7 turns them off)."""
    import tag.search.planner as planner
    from tag.modelio import load_inputs

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    inp = load_inputs(os.path.join(root, "datasets/models/mlp.onnx"),
                      os.path.join(root, "datasets/topologies/heterog8.json"))
    seen = []

    class Stop(Exception):
        pass

    def fake_start(*args, workers=0, **kw):
        seen.append(workers)
        raise Stop

    monkeypatch.setattr(planner, "search_start", fake_start)
    for limit in (8, 7):
        monkeypatch.setattr(planner, "WORKERS_MAX_DEVICES", limit)
        with pytest.raises(Stop):
            planner.plan(inp.gg, inp.cluster, inp.cost, inp.training, workers=3)
    assert seen == [3, 0]
