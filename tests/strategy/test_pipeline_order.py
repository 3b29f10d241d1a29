"""tag.strategy.pipeline worked by hand: the order each stage runs its passes (GPipe, 1F1B, kFkB with k = 2) for
2 stages x 4 micro-batches and 3 stages x 6, the micro-batches in flight, micro row maps and their errors.

The orders below are written out from the schedules' definitions, not from the code:
- GPipe: every forward in micro-batch order, then every backward.
- 1F1B (PipeDream-flush): stage s of S runs S - s - 1 warm-up forwards, then alternates one forward and one
  backward (the backward of the oldest micro-batch in flight), then drains the remaining backwards.
- kFkB (Ada-Grouper): 1F1B over units of k consecutive micro-batches (m / k units, min(S - s - 1, m / k) warm-up
  units); a unit's k passes run back to back in micro-batch order.
"""

import itertools

import pytest

from tag.strategy import slices
from tag.strategy.pipeline import Pipeline, Stage, max_in_flight, micro_rows, stage_order


def _parse(text: str) -> list[tuple[str, int]]:
    """'F0 F1 B0' -> [('F', 0), ('F', 1), ('B', 0)]."""
    return [(p[0], int(p[1:])) for p in text.split()]


# (schedule, k, stages, micro-batches) -> the order of each stage, by hand
HAND = {
    ("gpipe", 1, 2, 4): ["F0 F1 F2 F3 B0 B1 B2 B3",
                         "F0 F1 F2 F3 B0 B1 B2 B3"],
    ("1f1b", 1, 2, 4): ["F0 F1 B0 F2 B1 F3 B2 B3",  # 1 warm-up forward
                        "F0 B0 F1 B1 F2 B2 F3 B3"],
    # units {0,1} and {2,3}; stage 0 warms up one unit, so its steady round is F(unit 1) B(unit 0)
    ("kfkb", 2, 2, 4): ["F0 F1 F2 F3 B0 B1 B2 B3",
                        "F0 F1 B0 B1 F2 F3 B2 B3"],
    ("gpipe", 1, 3, 6): ["F0 F1 F2 F3 F4 F5 B0 B1 B2 B3 B4 B5"] * 3,
    ("1f1b", 1, 3, 6): ["F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5",  # 2 warm-up forwards
                        "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5",  # 1
                        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"],  # 0
    # units {0,1}, {2,3}, {4,5}; warm-up units 2, 1, 0
    ("kfkb", 2, 3, 6): ["F0 F1 F2 F3 F4 F5 B0 B1 B2 B3 B4 B5",
                        "F0 F1 F2 F3 B0 B1 F4 F5 B2 B3 B4 B5",
                        "F0 F1 B0 B1 F2 F3 B2 B3 F4 F5 B4 B5"],
}


@pytest.mark.parametrize("case", list(HAND), ids=lambda c: f"{c[0]}-k{c[1]}-S{c[2]}-m{c[3]}")
def test_stage_order_by_hand(case):
    schedule, k, n_stages, m = case
    for s, text in enumerate(HAND[case]):
        assert stage_order(schedule, k, n_stages, s, m) == _parse(text), (case, s)


def test_1f1b_is_kfkb_with_k_1():
    for n_stages, m in itertools.product(range(1, 6), range(1, 9)):
        for s in range(n_stages):
            assert stage_order("1f1b", 1, n_stages, s, m) == stage_order("kfkb", 1, n_stages, s, m)
            assert stage_order("1f1b", 7, n_stages, s, m) == stage_order("1f1b", 1, n_stages, s, m)  # k ignored


# in flight at once: 1F1B min(S - s, m), GPipe m, kFkB k x min(S - s, m / k)
IN_FLIGHT_HAND = {
    ("gpipe", 1, 2, 4): [4, 4], ("1f1b", 1, 2, 4): [2, 1], ("kfkb", 2, 2, 4): [4, 2],
    ("gpipe", 1, 3, 6): [6, 6, 6], ("1f1b", 1, 3, 6): [3, 2, 1], ("kfkb", 2, 3, 6): [6, 4, 2],
}


def test_max_in_flight_of_the_hand_orders():
    for case, want in IN_FLIGHT_HAND.items():
        assert [max_in_flight(_parse(text)) for text in HAND[case]] == want, case


def _formula(schedule: str, k: int, n_stages: int, s: int, m: int) -> int:
    if schedule == "gpipe":
        return m
    if schedule == "1f1b":
        return min(n_stages - s, m)
    return k * min(n_stages - s, m // k)


def test_max_in_flight_formula_over_many_shapes():
    for n_stages, m in itertools.product(range(1, 6), range(1, 13)):
        for s in range(n_stages):
            for schedule, k in [("gpipe", 1), ("1f1b", 1)] + [("kfkb", k) for k in range(1, m + 1) if m % k == 0]:
                order = stage_order(schedule, k, n_stages, s, m)
                assert max_in_flight(order) == _formula(schedule, k, n_stages, s, m), (schedule, k, n_stages, s, m)


def _runs_to_completion(schedule: str, k: int, n_stages: int, m: int) -> bool:
    """Play every stage's order against the pipeline's dependencies (F of stage s needs F of s - 1 on the same
    micro-batch; B of s needs B of s + 1 and its own F): True iff every pass runs (no deadlock)."""
    orders = [stage_order(schedule, k, n_stages, s, m) for s in range(n_stages)]
    done: set[tuple[int, str, int]] = set()
    pos = [0] * n_stages
    progress = True
    while progress:
        progress = False
        for s in range(n_stages):
            if pos[s] == len(orders[s]):
                continue
            kind, j = orders[s][pos[s]]
            ready = ((s == 0 or (s - 1, "F", j) in done) if kind == "F"
                     else (s, "F", j) in done and (s == n_stages - 1 or (s + 1, "B", j) in done))
            if ready:
                done.add((s, kind, j))
                pos[s] += 1
                progress = True
    return all(p == len(o) for p, o in zip(pos, orders))


def test_every_order_runs_each_pass_once_and_never_deadlocks():
    for n_stages, m in itertools.product(range(1, 5), range(1, 9)):
        for schedule, k in [("gpipe", 1), ("1f1b", 1)] + [("kfkb", k) for k in range(1, m + 1) if m % k == 0]:
            for s in range(n_stages):
                order = stage_order(schedule, k, n_stages, s, m)
                assert sorted(order) == sorted([("F", j) for j in range(m)] + [("B", j) for j in range(m)])
                assert all(order.index(("F", j)) < order.index(("B", j)) for j in range(m))
            assert _runs_to_completion(schedule, k, n_stages, m), (schedule, k, n_stages, m)


def test_stage_order_errors():
    with pytest.raises(ValueError, match="unknown schedule"):
        stage_order("zb", 1, 2, 0, 4)
    with pytest.raises(ValueError, match="does not divide"):
        stage_order("kfkb", 3, 2, 0, 4)
    with pytest.raises(ValueError, match="does not divide"):
        stage_order("kfkb", 0, 2, 0, 4)
    with pytest.raises(ValueError, match="micro_batches"):
        stage_order("1f1b", 1, 2, 0, 0)
    with pytest.raises(ValueError, match="not one of the 2 stages"):
        stage_order("1f1b", 1, 2, 2, 4)
    with pytest.raises(ValueError, match="not one of the 2 stages"):
        stage_order("gpipe", 1, 2, -1, 4)


def test_micro_rows_by_hand():
    # 96 + 32 rows over 8 micro-batches: 12 + 4 rows in each; a device with no rows keeps none
    assert micro_rows((96, 32, 0), 8) == (12, 4, 0)
    assert micro_rows((12, 4), 1) == (12, 4)
    assert micro_rows((0, 0, 4), 4) == (0, 0, 1)
    # what crosses a stage boundary in one micro-batch: producer 2 + 2 rows (of 16 / 4), consumer 3 + 1
    # (consumer m1/0 needs micro rows 0-2: 0-1 from m0/0, 2 from m0/1; m1/1 needs row 3, from m0/1)
    moved = slices(micro_rows((8, 8, 0, 0), 4), micro_rows((0, 0, 12, 4), 4))
    assert [(x.src, x.dst, x.start, x.rows) for x in moved] == [(0, 2, 0, 2), (1, 2, 2, 1), (1, 3, 3, 1)]


def test_micro_rows_errors():
    with pytest.raises(ValueError, match="not a multiple of 4"):
        micro_rows((10, 6), 4)
    with pytest.raises(ValueError, match="not a multiple of 3"):
        micro_rows((3, 1), 3)
    with pytest.raises(ValueError, match=">= 1"):
        micro_rows((8, 8), 0)


def test_pipeline_lookups_and_unit():
    p = Pipeline((Stage((0, 1), (0, 1)), Stage((2,), (2, 3))), 8, "kfkb", 4)
    assert p.stage_of_group() == {0: 0, 1: 0, 2: 1}
    assert p.stage_of_device() == {0: 0, 1: 0, 2: 1, 3: 1}
    assert p.unit == 4
    assert Pipeline(p.stages, 8, "gpipe").unit == 8
    assert Pipeline(p.stages, 8, "1f1b").unit == 1
