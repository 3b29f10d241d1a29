"""The point-to-point server sum (tag.deploy.p2p_collectives, the ps method on CPU) on 3 gloo ranks, against sums
worked out here.

Rank r holds x_r[k] = (r + 1) * 10 + k / 8 (exact in float32), so the total is known in closed form; a sub-set
of the ranks (one rank takes no part) and servers at either end.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from _deploy_harness import free_port

SIZES = [1, 2, 5, 7, 1000]


def _x(r: int, n: int) -> torch.Tensor:
    return (r + 1) * 10 + torch.arange(n, dtype=torch.float32) / 8


def _worker(rank, world, port, outdir):
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


def test_server_sums_on_three_ranks(tmp_path):
    mp.spawn(_worker, args=(3, free_port(), str(tmp_path)), nprocs=3, join=True)
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
