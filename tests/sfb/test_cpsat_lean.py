"""`tag.compression.cpsat`: the SFB model built on the lean model is the model `cp_model.CpModel` builds, field for
field, and both solvers return the same solutions; building and solving it does not import pandas."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compression"))
from sfbkit import TRAINING, random_instance  # noqa: E402

from tag.compression import cpsat, eligible_ops  # noqa: E402
from tag.compression.model import build_sfb_model, solve_built, solve_sfb_pool  # noqa: E402
from tag.compression.terms import build_terms  # noqa: E402
from tag.sim import simulate  # noqa: E402

cp_model = pytest.importorskip("ortools.sat.python.cp_model")


def _terms(seed: int):
    gg, cl, cost, s = random_instance(seed)
    cands = eligible_ops(gg, s)
    traced = simulate(gg, cl, cost, s, TRAINING, trace=True)
    return build_terms(gg, cl, cost, TRAINING, s, cands, traced), len(cands)


def test_the_lean_path_is_taken():
    assert cpsat._lean() is not None
    assert type(cpsat.new_model()).__name__ == "LeanModel"


@pytest.mark.parametrize("seed", [0, 3, 8])
def test_same_proto_and_solutions_as_cp_model(seed, monkeypatch):
    terms, n = _terms(seed)
    cuts = [[0], list(range(n))]
    lean = build_sfb_model(terms, exclude=cuts)
    monkeypatch.setattr(cpsat, "_lean", lambda: None)  # the reference: cp_model.CpModel and cp_model.CpSolver
    ref = build_sfb_model(terms, exclude=cuts)
    assert isinstance(ref.model, cp_model.CpModel)
    assert str(lean.model.Proto()) == str(ref.model.Proto())  # text format: variables, constraints, objective
    want = [solve_built(terms, ref, seed=s) for s in (0, 5)]
    monkeypatch.undo()
    got = [solve_built(terms, lean, seed=s) for s in (0, 5)]
    for a, b in zip(got, want):
        assert (a.chosen, a.status, a.objective_ms, a.empty_ms) == (b.chosen, b.status, b.objective_ms, b.empty_ms)


def test_pool_through_cp_model_is_the_same(monkeypatch):
    terms, n = _terms(6)
    lean = solve_sfb_pool(terms, 2 ** n + 1)
    monkeypatch.setattr(cpsat, "_lean", lambda: None)
    ref = solve_sfb_pool(terms, 2 ** n + 1)
    def rows(pool):  # nan (no solution) as its repr, so that two infeasible ends compare equal
        return [(r.chosen, r.status, repr(r.objective_ms)) for r in pool]
    assert rows(lean) == rows(ref)
    assert lean[-1].status == "INFEASIBLE"


def test_no_pandas_imported():
    code = ("import sys; sys.path.insert(0, %r); from sfbkit import random_instance, TRAINING; "
            "from tag.compression.model import solve_sfb_model; from tag.compression import eligible_ops; "
            "from tag.compression.terms import build_terms; from tag.sim import simulate; "
            "gg, cl, cost, s = random_instance(0); c = eligible_ops(gg, s); "
            "t = build_terms(gg, cl, cost, TRAINING, s, c, simulate(gg, cl, cost, s, TRAINING, trace=True)); "
            "r = solve_sfb_model(t); assert r.status == 'OPTIMAL', r.status; "
            "print('pandas' in sys.modules, 'ortools.sat.python.cp_model' in sys.modules)"
            % os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compression"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
