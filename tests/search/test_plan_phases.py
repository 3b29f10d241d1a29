"""`plan(on_phase=)`: the parts of the search announced in the order they run (the progress bar's label)."""

import pytest

from tag.modelio import ModelOptions, load_inputs
from tag.search.planner import plan


@pytest.fixture(scope="module")
def inp():
    return load_inputs("datasets/models/mlp.onnx", "datasets/topologies/heterog8.json", ModelOptions())


@pytest.mark.parametrize("kw, want", [
    ({"playouts": 4}, ["starts", "tree", "refine", "sfb"]),  # the structure tree's search
    ({"playouts": 0}, ["starts", "tree", "refine", "sfb"]),  # the per-group tree (0 playouts) and refinement
    ({"playouts": 4, "refine": False, "sfb": False}, ["starts", "tree"]),
])
def test_phases_in_order(inp, kw, want):
    seen = []
    plan(inp.gg, inp.cluster, inp.cost, inp.training, refine_simulations=10, workers=0, on_phase=seen.append, **kw)
    assert seen == want


def test_each_simulation_is_announced_with_the_count_so_far(inp):
    seen = []
    res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=4, refine_simulations=10, workers=0,
               on_simulation=seen.append)
    assert seen, "the search ran no simulation past its seeds"
    assert seen == list(range(seen[0], seen[0] + len(seen)))  # one call per simulation, counting up by one
    assert seen[-1] == res.simulations
