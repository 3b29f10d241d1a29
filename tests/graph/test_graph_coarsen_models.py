"""Coarsening on real models: the light ONNX zoo and the committed datasets models.

Invariants are checked independently (networkx) by `check_group_graph`; balance is held to the stated
factor 2 over max(ideal share, heaviest atom) on the combined compute + memory weight.
"""

from __future__ import annotations

import glob
import os

import onnx
import pytest

from coarsen_checks import check_group_graph
from tag.graph import load_model
from tag.graph.coarsen import atom_weights, atoms_of, coarsen, default_group_count

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_*.onnx")))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATASETS = sorted(glob.glob(os.path.join(ROOT, "datasets/models/*.onnx")))
MAX_DATASET_BYTES = 40e6  # keep the suite quick: skip nothing, but load only files under this size
_CACHE: dict[str, object] = {}


def _load(path):
    if path not in _CACHE:
        _CACHE[path] = load_model(path)
    return _CACHE[path]


def _check(graph, k):
    gg = coarsen(graph, k=k)
    n_atoms = max(atoms_of(graph)) + 1
    check_group_graph(gg, min(k, n_atoms))
    atom = atoms_of(graph)
    w = atom_weights(graph, atom, n_atoms)
    group_w = [sum(w[a] for a in {atom[i] for i in g.op_ids}) for g in gg.groups]
    assert max(group_w) <= 2.0 * max(w.sum() / len(gg.groups), w.max()) + 1e-9
    # group figures add up to the model's
    assert sum(g.param_bytes for g in gg.groups) == pytest.approx(graph.param_bytes)
    assert sum(g.fwd_flops_per_row for g in gg.groups) == pytest.approx(sum(o.fwd_flops_per_row for o in graph.ops))
    # no weight generator or free op (no FLOPs, no params) with a consumer sits alone in a group
    for g in gg.groups:
        if len(g.op_ids) == 1:
            op = graph.ops[g.op_ids[0]]
            has_consumer = any(graph.tensors[t].consumers for t in op.outputs if t in graph.tensors)
            free = op.is_weight_generator or (op.fwd_flops_per_row == 0 and op.fwd_flops_fixed == 0 and not op.params)
            assert not (free and has_consumer), f"{op.name} forms a group of its own"
    return gg


def test_light_zoo_found():
    assert len(LIGHT) >= 8


@pytest.mark.parametrize("path", LIGHT, ids=[os.path.basename(p)[6:-5] for p in LIGHT])
def test_light_models(path):
    graph = _load(path)
    for k in (2, default_group_count(graph, 4), 40):
        _check(graph, k)
    a, b = coarsen(graph, k=24), coarsen(_load(path), k=24)
    assert [g.op_ids for g in a.groups] == [g.op_ids for g in b.groups]


@pytest.mark.parametrize("path", DATASETS, ids=[os.path.basename(p)[:-5] for p in DATASETS])
def test_dataset_models(path):
    if os.path.getsize(path) > MAX_DATASET_BYTES:
        pytest.fail(f"{path} is larger than the test budget allows; raise MAX_DATASET_BYTES")
    graph = _load(path)
    for k in (default_group_count(graph, 8), 48):
        gg = _check(graph, k)
    for p, users in gg.shared_params.items():
        assert users[0] in [g.id for g in gg.groups if p in g.params]
        assert len(users) == len(set(users)) >= 2
