"""tag.cost.contention: the contention formulas by hand, and the two-pass prediction on a fake simulator."""

from types import SimpleNamespace

import numpy as np
import pytest

from tag.cost.contention import (ContentionTerms, between, compute_scale, compute_span_ms, concurrency, deployed_step_ms,
                                 with_handoff)

TERMS = ContentionTerms(ranks=2, rows=32, handoff_ms=0.25, alone_stretch=1.02, together_stretch=1.10,
                        together_speed=1.30)


def test_concurrency_is_busy_over_iteration_clamped():
    assert concurrency([40.0, 20.0], 40.0, 2) == (1.5, 2)
    assert concurrency([10.0, 0.0], 40.0, 2) == (1.0, 2)  # never below one rank
    assert concurrency([40.0, 40.0, 40.0], 30.0, 3) == (3.0, 3)  # never above n
    assert concurrency([5.0], 5.0, 1) == (1.0, 2)  # n at least 2
    assert concurrency([0.0, 0.0], 0.0, 2) == (1.0, 2)


def test_scale_by_hand():
    # c = 1.5 of n = 2: halfway. stretch 1.02 + 0.5 x 0.08 = 1.06; speed 1 + 0.5 x 0.3 = 1.15; 1.06 x 1.15 = 1.219
    assert between(1.02, 1.10, 1.5, 2) == pytest.approx(1.06)
    assert compute_scale(TERMS, 1.5, 2) == pytest.approx(1.219)
    assert compute_scale(TERMS, 1.0, 2) == pytest.approx(1.02)  # one rank computing: alone stretch, no speed loss
    assert compute_scale(TERMS, 2.0, 2) == pytest.approx(1.10 * 1.30)
    # c = 2 of n = 3: (2 - 1) / (3 - 1) = half way again
    assert compute_scale(TERMS, 2.0, 3) == pytest.approx(1.219)
    wall = ContentionTerms(2, 32, 0.25, 1.02, 1.10, 1.30, clock="wall")  # wall-clock op times hold the stretch
    assert compute_scale(wall, 1.5, 2) == pytest.approx(1.15)


def test_handoff_lengthens_every_pair_but_not_the_diagonal():
    cl = SimpleNamespace(latency_us=np.array([[0.0, 10.0], [12.0, 0.0]]))
    out = with_handoff(cl, 0.25)
    assert out.latency_us.tolist() == [[0.0, 260.0], [262.0, 0.0]]
    assert cl.latency_us.tolist() == [[0.0, 10.0], [12.0, 0.0]]  # the input is left alone


class _Cost:
    def __init__(self, k=1.0):
        self.k = k

    def scaled(self, f):
        return _Cost(self.k * f)


def _fake_simulate(calls, rank1_ms=15.0):
    """A 'simulator' of two ranks: rank 0 computes 30 ms x k, rank 1 `rank1_ms` x k, then a message of latency L
    (the cluster's [0][1] latency, us) ends the step: iteration = 30 k + L / 1000."""
    def simulate(gg, cluster, cost, strategy, training, *, overlap_sync, blocking_sends, trace=False):
        calls.append((cost.k, float(cluster.latency_us[0][1]), overlap_sync, blocking_sends))
        it = 30.0 * cost.k + cluster.latency_us[0][1] / 1e3
        events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "compute"}},
                  {"ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": 30e3 * cost.k},
                  {"ph": "X", "pid": 0, "tid": 1, "ts": 0.0, "dur": rank1_ms * 1e3 * cost.k}] if trace else []
        return SimpleNamespace(iteration_ms=it, fit_iteration_ms=it, oom=False,
                               busy_ms={"a": 30.0 * cost.k, "b": rank1_ms * cost.k}, trace_events=events)
    return simulate


def test_two_pass_prediction_by_hand():
    calls = []
    cl = SimpleNamespace(latency_us=np.array([[0.0, 100.0], [100.0, 0.0]]))
    res = deployed_step_ms(_fake_simulate(calls), None, cl, _Cost(), None, None, terms=TERMS, n_ranks=2,
                           fence_ms=0.5, overlap_sync=False)
    # pass 1: someone computes during [0, 30] ms (the message after it is no compute), busy 45 ms: c = 45 / 30
    c = 45.0 / 30.0
    k = (1.02 + (c - 1) * 0.08) * (1 + (c - 1) * 0.30)
    assert res.concurrency == pytest.approx(c) and res.n_ranks == 2 and res.scale == pytest.approx(k)
    # pass 2: compute 30 k, latency 100 us + 250 us; plus the 0.5 ms fence
    assert res.step_ms == pytest.approx(30.0 * k + 0.35 + 0.5)
    assert calls == [(1.0, 100.0, False, True), (pytest.approx(k), 350.0, False, True)]
    assert not res.oom


def test_without_terms_one_pass_and_the_fence():
    calls = []
    cl = SimpleNamespace(latency_us=np.array([[0.0, 100.0], [100.0, 0.0]]))
    res = deployed_step_ms(_fake_simulate(calls), None, cl, _Cost(), None, None, terms=None, n_ranks=2, fence_ms=0.25)
    assert res.step_ms == pytest.approx(30.1 + 0.25) and res.scale == 1.0 and len(calls) == 1


@pytest.mark.parametrize("cores,n_ranks,overlap", [(2, 2, False), (2, 3, False), (4, 2, True), (None, 2, True)])
def test_ranks_that_fill_the_cores_sum_after_the_backward(cores, n_ranks, overlap):
    """With the probe's cores known and at least as many ranks, both passes run the sums after the backward (the
    caller's overlap_sync=True is overridden); with spare cores or no figure, the caller's choice stands."""
    terms = ContentionTerms(2, 32, 0.25, 1.0, 1.0, 1.0, cores=cores)
    calls = []
    cl = SimpleNamespace(latency_us=np.array([[0.0, 10.0], [10.0, 0.0]]))
    res = deployed_step_ms(_fake_simulate(calls), None, cl, _Cost(), None, None, terms=terms, n_ranks=n_ranks)
    assert [c[2] for c in calls] == [overlap, overlap] and res.overlap_sync is overlap
    calls.clear()  # a plan that forbids the overlap keeps it off whatever the cores
    deployed_step_ms(_fake_simulate(calls), None, cl, _Cost(), None, None, terms=terms, n_ranks=n_ranks,
                     overlap_sync=False)
    assert [c[2] for c in calls] == [False, False]


@pytest.mark.parametrize("rank1_ms,share", [(30.0, 1.0), (15.0, 0.5), (0.0, 0.0)])
def test_the_fence_costs_a_call_after_compute_by_the_ranks_computing(rank1_ms, share):
    """The step's closing barrier: 0.25 ms measured hot, 0.9 ms for an all-reduce right after every rank computed.
    Both ranks computing 30 ms (c = 2): the call's 0.9 ms; rank 1 computing 15 ms (c = 45 / 30 = 1.5): halfway,
    0.25 + 0.5 x 0.65 = 0.575; rank 1 idle (c = 1): it waits on a core of its own, the hot 0.25. A hot figure above
    the call's (1.5) stands; p2p's cost is not a barrier's."""
    cl = SimpleNamespace(latency_us=np.array([[0.0, 0.0], [0.0, 0.0]]))
    cases = [((("allreduce", 0.9), ("p2p", 2.0)), 0.25, 0.25 + share * 0.65), ((("allreduce", 0.9),), 1.5, 1.5),
             ((("p2p", 2.0),), 0.25, 0.25), (None, 0.25, 0.25)]
    for calls, fence, added in cases:
        terms = ContentionTerms(2, 32, 0.0, 1.0, 1.0, 1.0, call_ms=calls)
        res = deployed_step_ms(_fake_simulate([], rank1_ms), None, cl, _Cost(), None, None, terms=terms, n_ranks=2,
                               fence_ms=fence)
        assert res.step_ms == pytest.approx(30.0 + added)  # the fake's 30 ms x k (k = 1: no stretch) + the fence


def test_concurrency_counts_only_the_time_someone_computes():
    """Data parallelism by hand: both ranks compute [0, 20] ms, then a 20 ms sum in which neither does. Over the
    40 ms iteration that is one rank on average, but while anyone computes both do: c = 40 / 20 = 2."""
    ev = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "compute"}},
          {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "network"}},
          {"ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": 20e3}, {"ph": "X", "pid": 0, "tid": 1, "ts": 0.0, "dur": 20e3},
          {"ph": "X", "pid": 1, "tid": 0, "ts": 20e3, "dur": 20e3}]
    assert compute_span_ms(ev) == pytest.approx(20.0)
    assert concurrency([20.0, 20.0], compute_span_ms(ev), 2) == (2.0, 2)
    assert concurrency([20.0, 20.0], 40.0, 2) == (1.0, 2)  # the iteration's ms instead: one rank
    # a pipeline by hand: rank 0 [0, 10], rank 1 [10, 20], rank 0 [15, 25]: union [0, 25], busy 30 -> c = 1.2
    ev2 = ev[:1] + [{"ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": 10e3},
                    {"ph": "X", "pid": 0, "tid": 1, "ts": 10e3, "dur": 10e3},
                    {"ph": "X", "pid": 0, "tid": 0, "ts": 15e3, "dur": 10e3}]
    assert compute_span_ms(ev2) == pytest.approx(25.0)
    assert compute_span_ms(ev[:2]) is None
