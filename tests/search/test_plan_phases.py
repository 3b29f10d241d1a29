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
