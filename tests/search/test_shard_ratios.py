"""tag.search.shard_ratios: the HAP linear program for shard shares, worked by hand and against a brute force."""

import random

import pytest

from tag.search.shard_ratios import RatioProblem, solve_ratios, whole_unit_ratios


def test_speeds_one_to_three_give_a_quarter_and_three_quarters():
    # the whole sharded work takes 4 ms on the slow device and 4/3 ms on the 3x faster one
    sol = solve_ratios(RatioProblem(work_ms=((4.0, 4.0 / 3.0),)))
    assert sol.ratios == pytest.approx((0.25, 0.75))
    assert sol.slowest_ms == pytest.approx(1.0)  # 0.25 x 4 = 0.75 x 4/3


def test_a_memory_cap_moves_the_share():
    # 10 GB sliced at share 1; the fast device has 6 GB usable -> r_fast <= 0.6, the slow one takes 0.4
    p = RatioProblem(work_ms=((4.0, 4.0 / 3.0),), sliced_bytes=((10e9, 10e9),), whole_bytes=((0.0, 0.0),),
                     usable_bytes=((16e9, 6e9),))
    sol = solve_ratios(p)
    assert sol.ratios == pytest.approx((0.4, 0.6))
    assert sol.slowest_ms == pytest.approx(1.6)  # 0.4 x 4
    # the whole bytes count too: 2 GB whole leaves 4 GB for the fast device's slice -> 0.4 / 0.6 the other way
    p2 = RatioProblem(work_ms=((4.0, 4.0 / 3.0),), sliced_bytes=((10e9, 10e9),), whole_bytes=((2e9, 2e9),),
                      usable_bytes=((16e9, 6e9),))
    assert solve_ratios(p2).ratios == pytest.approx((0.6, 0.4))


def test_infeasible_memory_gives_none():
    # 10 GB to split, 4 GB usable on each of two devices: at most 8 GB held
    p = RatioProblem(work_ms=((1.0, 1.0),), sliced_bytes=((10e9, 10e9),), usable_bytes=((4e9, 4e9),))
    assert solve_ratios(p) is None


def test_fixed_time_shifts_work_to_the_other_device():
    # t = 4 r0 = (1 - r0) 4/3 + 1  ->  r0 = 7/16, t = 1.75
    sol = solve_ratios(RatioProblem(work_ms=((4.0, 4.0 / 3.0),), fixed_ms=((0.0, 1.0),)))
    assert sol.ratios == pytest.approx((7 / 16, 9 / 16))
    assert sol.slowest_ms == pytest.approx(1.75)


def test_replicas_share_one_set_of_ratios():
    # replica 0: speeds 1 : 3 (work 4, 4/3); replica 1: two devices of speed 2 (work 2, 2). t >= 4 r0 and 2 r1 bind:
    # 4 r0 = 2 (1 - r0) -> r0 = 1/3, t = 4/3
    sol = solve_ratios(RatioProblem(work_ms=((4.0, 4.0 / 3.0), (2.0, 2.0))))
    assert sol.ratios == pytest.approx((1 / 3, 2 / 3))
    assert sol.slowest_ms == pytest.approx(4 / 3)


def test_ties_go_to_the_least_total_time():
    # device 0 repeats 10 ms of fixed work, so t = 10 whatever devices 1 and 2 take (up to 5 ms and 2.5 ms of
    # work); the least total time gives all the work to the faster device 1
    sol = solve_ratios(RatioProblem(work_ms=((1.0, 2.0, 4.0),), fixed_ms=((10.0, 0.0, 0.0),)))
    assert sol.ratios == pytest.approx((0.0, 1.0, 0.0), abs=1e-6)  # within the tie slack
    assert sol.slowest_ms == pytest.approx(10.0)


def test_the_lp_optimum_equals_a_brute_force_over_shares():
    rng = random.Random(7)
    for _ in range(25):
        work = tuple(rng.uniform(1, 10) for _ in range(2))
        fixed = tuple(rng.uniform(0, 3) for _ in range(2))
        sliced = tuple(rng.uniform(5, 20) for _ in range(2))
        usable = tuple(rng.uniform(3, 20) for _ in range(2))
        p = RatioProblem(work_ms=(work,), fixed_ms=(fixed,), sliced_bytes=(sliced,), whole_bytes=((0.0, 0.0),),
                         usable_bytes=(usable,))
        brute = [max(r * work[0] + fixed[0], (1 - r) * work[1] + fixed[1])
                 for r in (i / 20000 for i in range(20001))
                 if r * sliced[0] <= usable[0] and (1 - r) * sliced[1] <= usable[1]]
        sol = solve_ratios(p)
        if not brute:
            assert sol is None
        else:
            assert sol.slowest_ms == pytest.approx(min(brute), rel=1e-3, abs=1e-3)


def test_heads_round_to_the_best_exact_split():
    p = RatioProblem(work_ms=((4.0, 4.0 / 3.0),))
    # 6 heads at 0.25 / 0.75 = 1.5 / 4.5: 1 / 5 takes max(4/6, 5/6 x 4/3) = 1.11 ms, 2 / 4 takes 1.33 ms
    sol = whole_unit_ratios(p, (0.25, 0.75), 6, exact=True)
    assert sol.ratios == pytest.approx((1 / 6, 5 / 6)) and sol.slowest_ms == pytest.approx(10 / 9)
    # a memory cap of 4 heads' worth on the fast device (share 2/3 of 6 GB) forces 2 / 4
    capped = RatioProblem(work_ms=((4.0, 4.0 / 3.0),), sliced_bytes=((6.0, 6.0),), usable_bytes=((6.0, 4.0),))
    assert whole_unit_ratios(capped, (1 / 3, 2 / 3), 6, exact=True).ratios == pytest.approx((2 / 6, 4 / 6))
    # fewer units than devices: no split
    assert whole_unit_ratios(p, (0.5, 0.5), 1, exact=True) is None


def test_columns_keep_shard_sizes():
    p = RatioProblem(work_ms=((4.0, 4.0 / 3.0),))
    sol = whole_unit_ratios(p, (0.25, 0.75), 4096, exact=False)
    assert sol.ratios == (1024 / 4096, 3072 / 4096) and sol.slowest_ms == pytest.approx(1.0)
    # 10 columns at 1/3 each: shard_sizes gives 4 / 3 / 3
    third = RatioProblem(work_ms=((3.0, 3.0, 3.0),))
    assert whole_unit_ratios(third, (1 / 3, 1 / 3, 1 / 3), 10, exact=False).ratios == (0.4, 0.3, 0.3)
