"""The SFB model keeps one constraint per class of devices with equal coefficients (`tag.compression.model`): its
solutions are checked against the model's equations evaluated device by device for every subset (a second method,
no solver), with each device's constants (backward ends, step lengths) spread apart so that within a class the
largest must be the one that binds."""

from __future__ import annotations

import random

import pytest
from sfbkit import TRAINING, random_instance

from tag.compression import eligible_ops
from tag.compression.model import build_sfb_model, solve_sfb_pool
from tag.compression.terms import build_terms
from tag.sim import simulate


def spread_terms(seed: int):
    """The Terms of `random_instance(seed)` with every device's backward ends, step and end moved by up to 30 %."""
    gg, cl, cost, s = random_instance(seed, max_ops=5)
    cands = eligible_ops(gg, s)
    terms = build_terms(gg, cl, cost, TRAINING, s, cands, simulate(gg, cl, cost, s, TRAINING, trace=True))
    rng = random.Random(seed)
    jitter = {d: rng.uniform(0.7, 1.3) for d in terms.update_ms}
    terms.bwd_end_ms = {(g, d): t * jitter[d] for (g, d), t in terms.bwd_end_ms.items()}
    terms.update_ms = {d: t * jitter[d] for d, t in terms.update_ms.items()}
    terms.end_ms = {d: t * jitter[d] for d, t in terms.end_ms.items()}
    return terms


def end_units(terms, chosen: set[int], q) -> int:
    """The model's end time Z for the subset `chosen`, in its integer units: every constraint of the module docstring
    written per device, with r_u and f_u at their least values."""
    units, cands = terms.units, terms.cands
    group_of = [min(units[c.unit].groups) for c in cands]

    def saved(d, gmin):
        return sum(q(cands[i].bwd_saved_ms.get(d, 0.0)) for i in chosen if group_of[i] >= gmin)

    def added(d):
        return sum(q(cands[i].dw_added_ms.get(d, 0.0)) for i in chosen)

    z = max([0] + [q(terms.end_ms[d] + terms.update_ms[d]) - saved(d, -1) + added(d) for d in terms.update_ms])
    last: dict[tuple, int] = {}
    for u in sorted(range(len(units)), key=lambda u: (units[u].ready_ms, u)):
        unit = units[u]
        t = q(unit.alone_ms) + sum(q(cands[i].gather_ms) - q(unit.ar_ms_per_byte * cands[i].weight_bytes)
                                   for i in chosen if cands[i].unit == u)
        gmin = min(unit.groups)
        r = max([0] + [q(terms.bwd_end_ms[(g, d)]) - saved(d, gmin) for g in unit.groups for d in unit.devices
                       if (g, d) in terms.bwd_end_ms])
        f = max(0, r + t, last.get(unit.devices, -10 ** 18) + t)
        last[unit.devices] = f
        z = max([z] + [f + q(terms.update_ms[d]) + added(d) for d in unit.devices])
    comms: dict[int, set] = {}
    for unit in units:
        for l in unit.link_ms:
            comms.setdefault(l, set()).add(unit.devices)
    for l, cs in comms.items():
        if len(cs) < 2:
            continue
        users = [u for u, unit in enumerate(units) if l in unit.link_ms]
        load = sum(q(units[u].link_ms[l]) for u in users) + sum(
            q(cands[i].gather_link_ms.get(l, 0.0)) - q(units[cands[i].unit].link_ms_per_byte.get(l, 0.0)
                                                       * cands[i].weight_bytes)
            for i in chosen if cands[i].unit in users)
        z = max(z, q(min(units[u].ready_ms for u in users)) + load)
    return z


@pytest.mark.parametrize("seed", [0, 1, 3, 4, 5, 11])
def test_pool_matches_every_subset_evaluated_device_by_device(seed):
    terms = spread_terms(seed)
    n = len(terms.cands)
    devices = list(terms.update_ms)
    assert 1 <= n <= 5 and len(devices) >= 3
    scale = build_sfb_model(terms).scale

    def q(ms: float) -> int:
        return int(round(ms * scale))

    by_hand = {m: end_units(terms, {i for i in range(n) if m >> i & 1}, q) for m in range(2 ** n)}
    pool = solve_sfb_pool(terms, 2 ** n)
    assert all(r.status == "OPTIMAL" for r in pool)
    got = [q(r.objective_ms) for r in pool]
    assert got == sorted(by_hand.values())  # every subset once, in order of its end time
    for r in pool:  # and each listed subset ends where the equations put it
        assert q(r.objective_ms) == by_hand[sum(1 << i for i in r.chosen)]
