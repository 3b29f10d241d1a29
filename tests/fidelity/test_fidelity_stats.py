"""benchmarks/fidelity.py: Kendall tau-b and MAPE against hand values; random plans are valid row maps."""

import json
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import fidelity  # noqa: E402


def test_kendall_tau_b_hand_values():
    assert fidelity.kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert fidelity.kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # pairs of (1,2,3) vs (1,3,2): (1,2) conc, (1,3) conc, (2,3) disc -> (2 - 1) / 3
    assert fidelity.kendall_tau_b([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    # a tie in x: pairs (a,b) tied in x only, (a,c) conc, (b,c) conc -> 2 / sqrt((2 + 1) * 3)... by the formula
    # tau_b = (C - D) / sqrt((C + D + Tx) (C + D + Ty)) = 2 / sqrt(3 * 2)
    assert fidelity.kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / 6 ** 0.5)


def test_mape_hand_value():
    assert fidelity.mape([11.0, 8.0], [10.0, 10.0]) == pytest.approx(15.0)


def test_random_plans_are_valid_row_maps():
    base = {"model": {"batch_size": 16}, "decisions": [
        {"group": 0, "rows": {"a/0": 8, "a/1": 8}, "sync": "allreduce", "server": None, "sfb": []},
        {"group": 1, "rows": {"a/0": 16}, "sync": None, "server": None, "sfb": []},  # not splittable
        {"group": 2, "rows": {"a/0": 8, "a/1": 8}, "sync": None, "server": None, "sfb": []}]}
    rng = random.Random(3)
    seen_split = False
    for _ in range(50):
        plan = fidelity.random_plan(base, 2, rng)
        for dec, orig in zip(plan["decisions"], base["decisions"]):
            assert sum(dec["rows"].values()) == 16
            assert all(v > 0 for v in dec["rows"].values())
            assert set(dec["rows"]) <= {"a/0", "a/1"}
            if len(orig["rows"]) == 1:
                assert len(dec["rows"]) == 1
            if len(dec["rows"]) == 1 or orig["sync"] is None:
                assert dec["sync"] is None and dec["server"] is None
            elif dec["sync"] == "ps":
                assert dec["server"] in dec["rows"]
            seen_split |= len(dec["rows"]) == 2
    assert seen_split
    json.dumps(plan)
