"""Sync buckets as flat gradient buffers: the gradients are slices of one buffer the collective sums in place.

One process, rank 0 of a 2-rank data-parallel schedule on the toy model; a fake communicator stands in for
the other rank (its "sum" triples the buffer). The expected gradient is worked out separately: autograd of
rank 0's loss term over its own rows on a fresh copy of the parameters, times 3.
"""

from __future__ import annotations

import torch

from tag.deploy.data import make_optimizer, synthetic_batch
from tag.deploy.runtime import RankRuntime
from tag.deploy.schedule import build_schedule
from tag.strategy import Decision, Strategy
from _deploy_toy import TOY_GROUPS, ToyProgram, toy_graph

B = 12


class TripleComm:
    """No peers: every sum over ranks multiplies the buffer by 3 in place and records it."""

    def __init__(self):
        self.summed: list[torch.Tensor] = []

    def sum_over(self, flat, method, ranks, server):
        self.summed.append(flat)
        flat.mul_(3.0)

    def exchange(self, sends, recvs):
        raise AssertionError("a data-parallel plan with equal rows in every group moves no activations")


def _expected_grads(graph, data, targets, rows: int) -> dict[str, torch.Tensor]:
    prog = ToyProgram(graph, seed=0)
    env = {k: v[:rows] for k, v in data.items()}
    env = prog.run_ops(range(len(graph.ops)), env, rows)
    loss = sum(((env[t] - targets[t][:rows]) ** 2).sum() / targets[t].numel() for t in targets)
    names = prog.param_names
    grads = torch.autograd.grad(loss, [prog.param(n) for n in names])
    return {n: 3.0 * g for n, g in zip(names, grads)}


def test_gradients_are_slices_of_the_bucket_buffer_summed_in_place():
    graph = toy_graph(B)
    strategy = Strategy(tuple(Decision((6, 6), "ring") for _ in TOY_GROUPS), bucket_mb=25.0)
    s = build_schedule(graph, TOY_GROUPS, strategy, ["m0", "m0"], nproc=2)
    # one 25 MiB bucket holds groups 3, 1, 0's own parameters; the tied W1 (groups 0 and 3) syncs on its own
    assert [set(b.params) for b in s.buckets] == [{"W4", "b4", "W2", "b1", "W3"}, {"W1"}]
    data, targets = synthetic_batch(graph, B, 0)
    comm = TripleComm()
    rt = RankRuntime(s, graph, ToyProgram(graph, seed=0), 0, comm, data, targets, make_optimizer("sgd", 0.0))
    want = _expected_grads(graph, data, targets, 6)
    for step in range(2):  # lr 0: the same gradient every step, if the buffer is zeroed between steps
        rt.step()
        flats = comm.summed[-2:]
        for b, flat in zip(s.buckets, flats):
            assert flat.numel() == sum(rt.p.param(n).numel() for n in b.params)
            lo, hi = flat.data_ptr(), flat.data_ptr() + flat.numel() * flat.element_size()
            for n in b.params:
                g = rt.p.param(n).grad
                assert lo <= g.data_ptr() < hi, f"{n}: .grad is not a slice of its bucket's buffer"
                torch.testing.assert_close(g, want[n], rtol=1e-5, atol=1e-6)
    assert comm.summed[0] is comm.summed[2] and comm.summed[1] is comm.summed[3]  # one buffer per bucket per job
