"""The CP-SAT model that chooses SFB ops (one readable function: variables, constraints, objective, solve).

One binary x_o per candidate. Times are integers (ms x `scale`). Syncs over one communicator run one at
a time in ready order (`Terms.units`, as the simulator runs them), so a chain of finish times couples the
choices of every group on it:

    T_u   = alone_u - slope_u x sum_{o of u} x_o |W_o| + sum_{o of u} x_o gather_o        (sync time of unit u)
    r_u  >= bwd_end(g, d) - sum_{o in groups whose backward runs before or at g on d} x_o saved_{o,d}
    f_u  >= r_u + T_u,   f_u >= f_prev(u) + T_u                                            (communicator chain)
    Z    >= f_u + update_d + sum_{o on d} x_o added_{o,d}        for every device d of u   (step waits for syncs)
    Z    >= end_d - sum_{o on d} x_o saved_{o,d} + update_d + sum_{o on d} x_o added_{o,d}   (end_d: last fwd/bwd)
    Z    >= min_u ready_u + sum_u busy_{u,l}(x)                  for every link l shared by communicators
    minimise Z  (the iteration's end: exposed sync time plus added dW compute)

The sync traffic of a group hides behind the backward that follows it only until its communicator's
chain runs past the end of that backward; after that every byte counts. A per-op threshold cannot see this.

Devices with the same coefficients (saved_{o,d} and added_{o,d} for every o, in the model's integer units: a
data-parallel plan's devices of one type and row count) form a class. Their constraints above differ only in the
constant (bwd_end, update_d, end_d), so each class keeps the largest, which implies the rest: the same feasible
set and optimum, in a model that grows with the classes instead of the devices (64 devices, 127 syncs and 146
candidates: 2 classes, and each solve's presolve about 20x faster).
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.compression.terms import Terms


@dataclass
class ModelResult:
    chosen: list[int]  # candidate indices
    status: str
    objective_ms: float
    empty_ms: float  # the model's end time with nothing chosen
    solve_ms: float


WORK_LIMIT = 2.0  # CP-SAT deterministic time per solve (its own work units, about seconds on one core)


@dataclass
class SfbModel:
    """The model of the module docstring, built (`build_sfb_model`): the CpModel, the choice variables x, the
    objective Z and the integer time scale (units per ms)."""

    model: object
    x: list
    z: object
    scale: float

    def exclude(self, sub: list[int]) -> None:
        """A no-good cut: the solution must differ from the subset `sub` (candidate indices) in some x_o."""
        inside = set(sub)
        self.model.Add(sum(1 - self.x[i] for i in inside) + sum(self.x[i] for i in range(len(self.x))
                                                                if i not in inside) >= 1)


def build_sfb_model(terms: Terms, exclude: list[list[int]] | None = None) -> SfbModel:
    """Variables, constraints and objective of the module docstring, then a no-good cut per subset of `exclude`."""
    from tag.compression.cpsat import new_model

    units, cands = terms.units, terms.cands
    horizon_ms = max([terms.iteration_ms, 1e-6] + [u.ready_ms + u.alone_ms for u in units])
    horizon_ms += sum(c.gather_ms + max(c.dw_added_ms.values(), default=0.0) for c in cands)
    scale = 1e7 / horizon_ms

    def q(ms: float) -> int:
        return int(round(ms * scale))

    m = new_model()
    big = q(4 * horizon_ms) + 10
    x = [m.NewBoolVar(f"x{i}") for i in range(len(cands))]
    z = m.NewIntVar(0, big, "Z")
    by_unit: dict[int, list[int]] = {}
    for i, c in enumerate(cands):
        by_unit.setdefault(c.unit, []).append(i)
    group_of = [_group_of(terms, i) for i in range(len(cands))]
    # device classes (module docstring): key = (saved per candidate, added per candidate) in integer units
    class_of: dict = {}
    classes: dict[tuple, int] = {}
    for d in terms.update_ms:
        key = (tuple(q(c.bwd_saved_ms.get(d, 0.0)) for c in cands), tuple(q(c.dw_added_ms.get(d, 0.0)) for c in cands))
        class_of[d] = classes.setdefault(key, len(classes))
    keys = list(classes)
    added = [sum(x[i] * v for i, v in enumerate(key[1]) if v) for key in keys]
    shifts: dict[tuple, object] = {}

    def shift_of(k: int, gmin: int):
        """Backward time saved on class k's devices by candidates of groups >= gmin (whose backward runs first)."""
        if (k, gmin) not in shifts:
            shifts[(k, gmin)] = sum(x[i] * v for i, v in enumerate(keys[k][0]) if v and group_of[i] >= gmin)
        return shifts[(k, gmin)]

    def largest(pairs) -> dict[int, int]:
        """class -> the largest constant of (device, constant) pairs."""
        out: dict[int, int] = {}
        for d, v in pairs:
            k = class_of[d]
            out[k] = max(out.get(k, v), v)
        return out

    for k, end in largest((d, q(terms.end_ms[d] + terms.update_ms[d])) for d in terms.update_ms).items():
        m.Add(z >= end - shift_of(k, -1) + added[k])
    prev_by_comm: dict[tuple, object] = {}
    order = sorted(range(len(units)), key=lambda u: (units[u].ready_ms, u))
    for u in order:
        unit = units[u]
        t = q(unit.alone_ms) + sum(x[i] * (q(cands[i].gather_ms) - q(unit.ar_ms_per_byte * cands[i].weight_bytes))
                                   for i in by_unit.get(u, []))
        r = m.NewIntVar(0, big, f"r{u}")
        gmin = min(unit.groups)
        ready = largest((d, q(terms.bwd_end_ms[(g, d)])) for g in unit.groups for d in unit.devices
                        if (g, d) in terms.bwd_end_ms)
        for k, end in ready.items():
            m.Add(r >= end - shift_of(k, gmin))
        f = m.NewIntVar(0, big, f"f{u}")
        m.Add(f >= r + t)
        prev = prev_by_comm.get(unit.devices)
        if prev is not None:
            m.Add(f >= prev + t)
        prev_by_comm[unit.devices] = f
        for k, step in largest((d, q(terms.update_ms[d])) for d in unit.devices).items():
            m.Add(z >= f + step + added[k])
    link_comms: dict[int, set] = {}
    for unit in units:
        for l in unit.link_ms:
            link_comms.setdefault(l, set()).add(unit.devices)
    for l, comms in link_comms.items():
        if len(comms) < 2:
            continue
        users = [u for u, unit in enumerate(units) if l in unit.link_ms]
        start = min(units[u].ready_ms for u in users)
        load = sum(q(units[u].link_ms[l]) for u in users)
        for u in users:
            load += sum(x[i] * (q(cands[i].gather_link_ms.get(l, 0.0))
                                - q(units[u].link_ms_per_byte.get(l, 0.0) * cands[i].weight_bytes))
                        for i in by_unit.get(u, []))
        m.Add(z >= q(start) + load)
    m.Minimize(z)
    built = SfbModel(m, x, z, scale)
    for sub in exclude or []:
        built.exclude(sub)
    return built


def solve_built(terms: Terms, built: SfbModel, *, seed: int = 0, time_limit_s: float = 10.0,
                work_limit: float = WORK_LIMIT) -> ModelResult:
    """Solve a built model of `terms`; returns the chosen candidates (indices). The solve stops at `work_limit`
    (CP-SAT's deterministic time on one worker: the same answer on any machine under any load) or, as a safety cap
    only, after `time_limit_s` of wall-clock time; a stop before optimality gives status FEASIBLE."""
    from tag.compression.cpsat import solve

    out = solve(built.model, seed=seed, num_workers=1, time_limit_s=time_limit_s, work_limit=work_limit)
    if out.status not in ("OPTIMAL", "FEASIBLE"):
        return ModelResult([], out.status, float("nan"), float("nan"), out.wall_time_s * 1e3)
    chosen = [i for i in range(len(built.x)) if out.value(built.x[i])]
    scale = built.scale
    empty = _empty_ms(terms, lambda ms: int(round(ms * scale))) / scale
    return ModelResult(chosen, out.status, out.objective_value / scale, empty, out.wall_time_s * 1e3)


def solve_sfb_model(terms: Terms, *, seed: int = 0, time_limit_s: float = 10.0, work_limit: float = WORK_LIMIT,
                    exclude: list[list[int]] | None = None) -> ModelResult:
    """Build and solve the model of the module docstring (`build_sfb_model`, `solve_built`).

    exclude: subsets (candidate index lists) the solution must differ from (no-good cuts), so repeated
    calls list the model's best subsets in order (`solve_sfb_pool` does that on one model)."""
    return solve_built(terms, build_sfb_model(terms, exclude), seed=seed, time_limit_s=time_limit_s,
                       work_limit=work_limit)


def solve_sfb_pool(terms: Terms, count: int, *, seed: int = 0, time_limit_s: float = 10.0,
                   work_limit: float = WORK_LIMIT) -> list[ModelResult]:
    """The model's `count` best subsets in order: solve, cut the solution off (`SfbModel.exclude`), solve again;
    the list ends early with the first solve that finds no solution. The model is built once and the cuts are
    appended to it, so the i-th solve sees the same model as `solve_sfb_model(terms, exclude=<the i subsets
    before>)`, constraint for constraint, and (one worker, a fixed seed, a deterministic work limit) gives the
    same answer, without building the model again."""
    built = build_sfb_model(terms)
    out: list[ModelResult] = []
    for _ in range(count):
        res = solve_built(terms, built, seed=seed, time_limit_s=time_limit_s, work_limit=work_limit)
        out.append(res)
        if res.status not in ("OPTIMAL", "FEASIBLE"):
            break
        built.exclude(res.chosen)
    return out


def _group_of(terms: Terms, i: int) -> int:
    return min(terms.units[terms.cands[i].unit].groups)


def _empty_ms(terms: Terms, q) -> float:
    """The model's end time with nothing chosen (integer units), for the report."""
    z = max([q(terms.end_ms[d] + terms.update_ms[d]) for d in terms.end_ms] + [0])
    fin: dict[tuple, int] = {}
    for u in sorted(range(len(terms.units)), key=lambda u: (terms.units[u].ready_ms, u)):
        unit = terms.units[u]
        f = max(q(unit.ready_ms), fin.get(unit.devices, 0)) + q(unit.alone_ms)
        fin[unit.devices] = f
        z = max(z, max(f + q(terms.update_ms[d]) for d in unit.devices))
    return z
