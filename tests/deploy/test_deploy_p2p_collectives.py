"""The gradient sum algorithms (tag.deploy.comm / p2p_collectives) on 3 and 4 gloo ranks, against sums worked out
here.

Rank r holds x_r[k] = (r + 1) * 10 + k / 8 (exact in float32, and so is every partial sum), so the total over a
rank set S is sum_{r in S} (r + 1) * 10 + |S| k / 8 whatever the order of the additions: every algorithm must give
it bit for bit on every rank of S and leave the other ranks' buffers alone. Sizes include buffers smaller than the
number of hierarchical shards (empty shards).
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from _deploy_harness import free_port
from tag.deploy.rank_exit import exit_rank

SIZES = [1, 2, 5, 7, 1000]
# (algorithm, ranks, server, machine of each rank)
CASES_4 = [
    ("ring", (0, 1, 2, 3), None, ("m0", "m0", "m1", "m1")),
    ("tree", (0, 1, 2, 3), None, ("m0", "m0", "m1", "m1")),
    ("tree", (1, 2, 3), None, ("m0", "m0", "m1", "m1")),
    ("tree", (0, 3), None, ("m0", "m0", "m1", "m1")),
    ("hierarchical", (0, 1, 2, 3), None, ("m0", "m0", "m1", "m1")),  # 2 shards, 2 machines
    ("hierarchical", (0, 1, 2, 3), None, ("m0", "m1", "m0", "m1")),  # machines interleaved over ranks
    ("hierarchical", (0, 1, 2, 3), None, ("m0", "m0", "m0", "m1")),  # uneven machines: 1 shard
    ("hierarchical", (0, 1, 2, 3), None, ("m0", "m0", "m0", "m0")),  # one machine: reduce-scatter + all-gather
    ("hierarchical", (1, 2, 3), None, ("m0", "m0", "m1", "m1")),
    ("leader", (0, 1, 2, 3), None, ("m0", "m0", "m1", "m1")),
    ("leader", (0, 2, 3), None, ("m0", "m0", "m1", "m1")),
    ("ps", (0, 1, 2, 3), 3, ("m0", "m0", "m1", "m1")),
]


def _x(r: int, n: int) -> torch.Tensor:
    return (r + 1) * 10 + torch.arange(n, dtype=torch.float32) / 8


def _worker_ps3(rank, world, port, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    from tag.deploy.p2p_collectives import server_sum

    out = {}
    try:
        for n in SIZES:
            if rank in (0, 2):  # a sub-set: ranks 0 and 2 through server 2; rank 1 takes no part
                y = _x(rank, n)
                server_sum(y, (0, 2), 2, rank)
                out[("ps", n)] = y
            z = _x(rank, n)
            server_sum(z, (0, 1, 2), 0, rank)
            out[("ps3", n)] = z
        torch.save(out, os.path.join(outdir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()
    exit_rank()  # success: skip the C++ teardown that can abort (tag.deploy.rank_exit)


def test_server_sums_on_three_ranks(tmp_path):
    mp.spawn(_worker_ps3, args=(3, free_port(), str(tmp_path)), nprocs=3, join=True)
    got = [torch.load(os.path.join(tmp_path, f"{r}.pt")) for r in range(3)]
    for n in SIZES:
        k = torch.arange(n, dtype=torch.float32) / 8
        all3 = (10 + 20 + 30) + 3 * k  # sum over r of (r + 1) * 10 + k
        pair = (10 + 30) + 2 * k
        for r in range(3):
            assert torch.equal(got[r][("ps3", n)], all3), (r, n)
        for r in (0, 2):
            assert torch.equal(got[r][("ps", n)], pair), (r, n)
        assert ("ps", n) not in got[1]


def _worker_algorithms(rank, world, port, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    from tag.deploy.comm import Comm
    from tag.deploy.schedule import SyncBucket

    out = {}
    try:
        for c, (alg, ranks, server, machines) in enumerate(CASES_4):
            bucket = SyncBucket(alg, ranks, server, ("w",))
            comm = Comm(rank, world, list(machines), Comm.needed_sets([bucket], [], list(machines)))
            for n in SIZES:
                y = _x(rank, n)
                if rank in ranks:
                    comm.sum_over(y, alg, ranks, server)
                out[(c, n)] = y
        torch.save(out, os.path.join(outdir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()
    exit_rank()  # success: skip the C++ teardown that can abort (tag.deploy.rank_exit)


def test_every_algorithm_sums_exactly_on_four_ranks(tmp_path):
    mp.spawn(_worker_algorithms, args=(4, free_port(), str(tmp_path)), nprocs=4, join=True)
    got = [torch.load(os.path.join(tmp_path, f"{r}.pt")) for r in range(4)]
    for c, (alg, ranks, _, machines) in enumerate(CASES_4):
        for n in SIZES:
            k = torch.arange(n, dtype=torch.float32) / 8
            total = sum((r + 1) * 10 for r in ranks) + len(ranks) * k
            for r in range(4):
                want = total if r in ranks else _x(r, n)
                assert torch.equal(got[r][(c, n)], want), (alg, ranks, machines, n, r)


def test_shard_bounds_cover_the_buffer_in_order():
    from tag.deploy.p2p_collectives import shard_bounds

    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shard_bounds(1, 2) == [(0, 1), (1, 1)]
    assert shard_bounds(8, 2) == [(0, 4), (4, 8)]
