"""`tag.search.gc_pause.gc_paused` and plan() running under it: the cyclic collector is off inside, back on after
(also after an exception), a caller's own `gc.disable()` is kept, and a plan is the same with the collector on."""

import gc

import pytest

from tag.search.gc_pause import gc_paused
from tag.search.planner import plan
from tag.strategy import TrainingConfig
from tests.search.test_search_plan_guarantees import FlatCost, two_wide_layers


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_off_inside_on_after():
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_on_again_after_an_exception():
    with pytest.raises(ValueError):
        with gc_paused():
            raise ValueError("boom")
    assert gc.isenabled()


def test_nested_and_caller_disabled_are_respected():
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()  # the inner pause does not switch it on inside the outer one
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()  # it was off before: it stays off


def test_plan_runs_with_the_collector_off_and_finds_the_same_plan():
    gg, cluster = two_wide_layers()
    seen = []
    paused = plan(gg, cluster, FlatCost(), TrainingConfig(), playouts=20, seed=1, sfb=False,
                  on_progress=lambda done, ms: seen.append(gc.isenabled()))
    assert seen and not any(seen)
    assert gc.isenabled()
    # the same search with the collector forced to run at every allocation batch (threshold 1): the same plan
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        unwrapped = plan.__wrapped__(gg, cluster, FlatCost(), TrainingConfig(), playouts=20, seed=1, sfb=False)
    finally:
        gc.set_threshold(*old)
    assert unwrapped.strategy == paused.strategy
    assert unwrapped.result.iteration_ms == paused.result.iteration_ms
    assert unwrapped.simulations == paused.simulations


def test_tag_plan_runs_with_the_collector_off():
    """`tag plan`'s run() (loading the inputs and networks, the search, writing the plan) is paused as a whole."""
    from tag.cli.plan import run

    class Stop(BaseException):
        pass

    seen = []

    class Args:  # the first flag run() reads records the collector's state and stops it
        def __getattr__(self, name):
            seen.append(gc.isenabled())
            raise Stop

    with pytest.raises(Stop):
        run(Args())
    assert seen == [False] and gc.isenabled()
