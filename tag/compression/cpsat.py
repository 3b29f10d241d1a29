"""CP-SAT for the SFB model without importing `ortools.sat.python.cp_model`, which imports pandas for its Series
helpers (~0.12 s of CPU of every `tag plan` process; benchmarks/plan_time.md, part 12).

`new_model()` returns cp_model's own C++ base class (`cp_model_helper.CpBaseModel`) with the methods the SFB model
calls (NewBoolVar, NewIntVar, Add, Minimize, Proto) written as ortools 9.15's `cp_model.CpModel` writes them, so the
model proto is the same field for field (tests/sfb/test_cpsat_lean.py builds both and compares them); `solve()` hands
that proto and the same parameters to the same solver entry point (`cp_model_helper.SolveWrapper`) that
`cp_model.CpSolver.Solve` uses. An ortools whose helper lacks any of this gets `cp_model` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

_NEEDED = ("CpBaseModel", "IntVar", "BoundedLinearExpression", "FlatIntExpr", "SatParameters", "SolveWrapper",
           "ResponseHelper")


@cache
def _lean():
    """(the lean model class, cp_model_helper) or None when this ortools' helper lacks what it needs."""
    try:
        from ortools.sat.python import cp_model_helper as cmh
        from ortools.util.python.sorted_interval_list import Domain
    except ImportError:
        return None
    if not all(hasattr(cmh, n) for n in _NEEDED) or not hasattr(cmh.CpBaseModel, "_add_bounded_linear_expression"):
        return None

    class LeanModel(cmh.CpBaseModel):
        """`cp_model.CpModel`'s variable, constraint and objective methods the SFB model uses, on the same base."""

        def __init__(self):
            cmh.CpBaseModel.__init__(self, None)

        def Proto(self):
            return self.model_proto

        def NewBoolVar(self, name: str):
            return cmh.IntVar(self.model_proto).with_name(name).with_domain(Domain(0, 1))

        def NewIntVar(self, lb: int, ub: int, name: str):
            return cmh.IntVar(self.model_proto).with_name(name).with_domain(Domain(lb, ub))

        def Add(self, ct):
            if not isinstance(ct, cmh.BoundedLinearExpression):
                raise TypeError(f"not supported: Add({type(ct).__name__!r}); the SFB model adds linear bounds only")
            return self._add_bounded_linear_expression(ct)

        def Minimize(self, obj) -> None:
            """An integer linear objective, as `cp_model.CpModel._set_objective(obj, maximize=False)` writes it."""
            proto = self.model_proto
            proto.clear_objective()
            proto.clear_floating_point_objective()
            flat = cmh.FlatIntExpr(obj)
            for var in flat.vars:
                proto.objective.vars.append(var.index)
            proto.objective.scaling_factor = 1.0
            proto.objective.offset = flat.offset
            proto.objective.coeffs.extend(flat.coeffs)

    return LeanModel, cmh


def new_model():
    """An empty CP-SAT model: the lean one when this ortools allows it, else `cp_model.CpModel()`."""
    lean = _lean()
    if lean is not None:
        return lean[0]()
    from ortools.sat.python import cp_model

    return cp_model.CpModel()


@dataclass
class Solved:
    """What the SFB model reads of a solve: the status name, the objective, the wall time (s) and variable values."""

    status: str
    objective_value: float
    wall_time_s: float
    value: Callable[[object], int]


def solve(model, *, seed: int, num_workers: int, time_limit_s: float, work_limit: float) -> Solved:
    """Solve `model` (from `new_model`) with these CP-SAT parameters (random_seed, num_workers,
    max_time_in_seconds, max_deterministic_time)."""
    lean = _lean()
    if lean is not None and isinstance(model, lean[0]):
        cmh = lean[1]
        params = cmh.SatParameters()
        _set(params, seed, num_workers, time_limit_s, work_limit)
        wrapper = cmh.SolveWrapper()
        wrapper.set_parameters(params)
        resp = wrapper.solve(model.model_proto)
        return Solved(resp.status.name, resp.objective_value, resp.wall_time,
                      lambda v: cmh.ResponseHelper.value(resp, v))
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    _set(solver.parameters, seed, num_workers, time_limit_s, work_limit)
    st = solver.Solve(model)
    return Solved(solver.StatusName(st), solver.ObjectiveValue(), solver.WallTime(), solver.Value)


def _set(params, seed: int, num_workers: int, time_limit_s: float, work_limit: float) -> None:
    params.random_seed = seed
    params.num_workers = num_workers
    params.max_time_in_seconds = time_limit_s
    params.max_deterministic_time = work_limit
