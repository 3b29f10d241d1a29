"""Bucket syncs overlap the backward (tag.deploy.runtime, Comm.start_sum), as DDP's do.

1. One process, rank 0 of a 2-rank data-parallel toy schedule with one bucket per group; a fake communicator records,
   at each bucket's start, which parameters already hold a gradient, and sums (x 3: the other rank's share) only
   when the runtime waits. By hand (`_deploy_toy`: group 0 owns b1, W3; group 1 W2; group 2 nothing; group 3 W4, b4;
   W1 tied between groups 0 and 3; backwards run 3, 2, 1, 0): bucket (W4, b4) starts after group 3's backward, when
   W4, b4 and W1 (through g5 in group 3) hold gradients and W2, b1, W3 do not; bucket (W2) after group 1's, before
   group 0's (b1, W3 still zero); (b1, W3) and then the tied W1 after group 0's. The optimizer sees 3 x rank 0's
   gradient, worked out by autograd on a fresh copy (`test_deploy_grad_buckets._expected_grads`).
2. Four gloo ranks (machines m0 m0 m1 m1): every algorithm's sum started back to back on one `Comm` (ring as
   gloo's asynchronous all-reduce, the rest on the sync thread), all in flight at once, waited for at the end: each
   buffer holds the total worked out by hand (values exact in float32, `test_deploy_p2p_collectives`).
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tag.deploy.rank_exit import exit_rank
from tag.deploy.data import make_optimizer, synthetic_batch
from tag.deploy.runtime import RankRuntime
from tag.deploy.schedule import build_schedule
from tag.strategy import Decision, Strategy
from _deploy_harness import free_port
from _deploy_toy import TOY_GROUPS, ToyProgram, toy_graph
from test_deploy_grad_buckets import _expected_grads

B = 12
NAMES = ("W1", "b1", "W2", "W3", "W4", "b4")


class LateTripleComm:
    """start_sum records which parameters hold a gradient; the sum (x 3) happens at wait."""

    def __init__(self, program):
        self.p, self.starts, self.waited = program, [], 0

    def start_sum(self, flat, method, ranks, server):
        has = {n for n in NAMES if self.p.param(n).grad is not None and bool(self.p.param(n).grad.abs().sum() > 0)}
        self.starts.append(has)
        comm = self

        class Handle:
            def wait(self):
                comm.waited += 1
                flat.mul_(3.0)

        return Handle()

    def exchange(self, sends, recvs):
        raise AssertionError("a data-parallel plan with equal rows in every group moves no activations")


def test_each_bucket_starts_once_its_groups_backward_is_done():
    graph = toy_graph(B)
    s = build_schedule(graph, TOY_GROUPS, Strategy(tuple(Decision((6, 6), "tree") for _ in TOY_GROUPS), 0.0),
                       ["m0", "m0"], nproc=2)
    assert [b.params for b in s.buckets] == [("W4", "b4"), ("W2",), ("b1", "W3"), ("W1",)]
    data, targets = synthetic_batch(graph, B, 0)
    prog = ToyProgram(graph, seed=0)
    comm = LateTripleComm(prog)
    rt = RankRuntime(s, graph, prog, 0, comm, data, targets, make_optimizer("sgd", 0.0))
    # (the group after whose backward each collective starts, its kind, the bucket's parameters), in start order
    assert [(g, kind, item[0].params) for g, kind, item in rt.sync_items] == [
        (3, "bucket", ("W4", "b4")), (1, "bucket", ("W2",)), (0, "bucket", ("b1", "W3")), (0, "bucket", ("W1",))]
    want = _expected_grads(graph, data, targets, 6)
    for step in range(2):
        rt.step()
        assert comm.starts[4 * step:] == [{"W4", "b4", "W1"}, {"W4", "b4", "W1", "W2"}, set(NAMES), set(NAMES)]
        assert comm.waited == 4 * (step + 1)
        for n in NAMES:
            torch.testing.assert_close(prog.param(n).grad, want[n], rtol=1e-5, atol=1e-6)


MACHINES = ("m0", "m0", "m1", "m1")
CASES = [("ring", (0, 1, 2, 3), None), ("tree", (0, 1, 2, 3), None), ("ring", (0, 1, 2, 3), None),
         ("tree", (1, 2, 3), None), ("hierarchical", (0, 1, 2, 3), None), ("ring", (0, 3), None),
         ("leader", (0, 2, 3), None), ("ps", (0, 1, 2, 3), 3), ("tree", (0, 3), None), ("ring", (0, 1, 2, 3), None)]
SIZES = [1, 7, 1000]


def _x(r: int, n: int, c: int) -> torch.Tensor:
    return (r + 1) * 10 + c + torch.arange(n, dtype=torch.float32) / 8


def _worker_in_flight(rank, world, port, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    from tag.deploy.comm import Comm
    from tag.deploy.schedule import SyncBucket

    buckets = [SyncBucket(alg, ranks, server, ("w",)) for alg, ranks, server in CASES]
    comm = Comm(rank, world, list(MACHINES), Comm.needed_sets(buckets, [], list(MACHINES)))
    out, handles = {}, []
    try:
        for n in SIZES:
            for c, (alg, ranks, server) in enumerate(CASES):
                y = _x(rank, n, c)
                if rank in ranks:
                    handles.append(comm.start_sum(y, alg, ranks, server))
                out[(c, n)] = y
        for h in handles:
            h.wait()
        comm.close()
        torch.save(out, os.path.join(outdir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()
    exit_rank()  # success: skip the C++ teardown that can abort (tag.deploy.rank_exit)


def test_started_sums_all_in_flight_on_four_ranks(tmp_path):
    mp.spawn(_worker_in_flight, args=(4, free_port(), str(tmp_path)), nprocs=4, join=True)
    got = [torch.load(os.path.join(tmp_path, f"{r}.pt")) for r in range(4)]
    for c, (alg, ranks, _) in enumerate(CASES):
        for n in SIZES:
            k = torch.arange(n, dtype=torch.float32) / 8
            total = sum((r + 1) * 10 + c for r in ranks) + len(ranks) * k
            for r in range(4):
                want = total if r in ranks else _x(r, n, c)
                assert torch.equal(got[r][(c, n)], want), (alg, ranks, n, r)
