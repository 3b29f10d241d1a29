"""ZeRO 2-3 reduce-scatters one call per plan bucket on CPU ranks (issue 27), counted by hand, and still equivalent.

The toy model (`_deploy_toy`) on 2 gloo ranks, rows 8 + 8 in every group, Adam, 3 steps, with explicit buckets
[3] and [1, 0] (group 2 has no parameters). The units (`zero_plan.zero_units`): group 0 (b1, W3), group 1 (W2),
group 3 (W4, b4); W1 is used by groups 0 and 3, so it stays out of ZeRO and is summed by its own bucket.

Counted by hand per step and rank:

* reduce-scatter calls (`p2p_collectives.post_scatter_sums`): 2, one per plan bucket, holding 1 unit (group 3,
  started after group 3's backward) and then 2 units (groups 0 and 1, started after group 0's backward); each a
  single batch of messages (`_post_all` with `SCATTER_TAG`): 2 batches, 3 messages sent per rank (one shard per
  unit to the other rank). Before this change: 3 calls, one per unit.
* weight gathers (`ZERO_GATHER_TAG` batches): ZeRO 2, one batch after the step for all 3 units; ZeRO 3, one per unit
  before its forward and again before its backward: 6, and once more per unit after the last step (the trained
  weights, `ZeroShards.full_weights`).

Parameters and losses equal plain single-process training at rtol 1e-4 (`assert_ranks_match_reference`).
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from _deploy_harness import assert_ranks_match_reference, free_port, reference_training
from _deploy_toy import TOY_GROUPS, ToyProgram, toy_graph
from tag.deploy.data import synthetic_batch
from tag.deploy.rank_exit import exit_rank
from tag.strategy import Bucket, Decision, Strategy

B, STEPS = 16, 3


def _strategy(zero: int) -> Strategy:
    return Strategy(tuple(Decision((8, 8), "ring", zero=zero) for _ in range(4)),
                    buckets=(Bucket((3,), "ring"), Bucket((1, 0), "ring")))


def _worker(rank, world, port, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    import tag.deploy.p2p_collectives as p2p
    import tag.deploy.zero as zero_mod
    from tag.deploy.schedule import build_schedule
    from tag.deploy.train import train_rank

    log: list = []
    post_all, post_scatters = p2p._post_all, zero_mod.post_scatter_sums

    def counted_post_all(sends, recvs, tag):
        log.append(("batch", tag, len(sends)))
        post_all(sends, recvs, tag)

    def counted_scatters(items, tag):
        log.append(("call", tuple(len(it[0]) for it in items)))
        post_scatters(items, tag)

    p2p._post_all, zero_mod.post_scatter_sums = counted_post_all, counted_scatters
    try:
        for z in (2, 3):
            log.clear()
            graph = toy_graph(B)
            program = ToyProgram(graph, seed=0)
            sched = build_schedule(graph, TOY_GROUPS, _strategy(z), ["m0", "m0"], nproc=world)
            res = train_rank(sched, graph, program, rank, STEPS, 0, "adam", 0.01)
            torch.save({"losses": res.losses, "params": res.params, "log": list(log)},
                       os.path.join(outdir, f"zero{z}_{rank}.pt"))
    finally:
        dist.destroy_process_group()
    exit_rank()


def test_zero2_and_3_reduce_scatter_once_per_bucket(tmp_path):
    mp.spawn(_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    graph = toy_graph(B)
    data, targets = synthetic_batch(graph, B, 0)
    ref_losses, ref_params = reference_training(graph, ToyProgram(graph, seed=0), data, targets, STEPS, "adam", 0.01)
    # the units' full flat sizes (padded to 2 x shard), a call's units in group order: group 3 W4 + b4 = 64 + 4;
    # group 0 b1 + W3 = 16 + 128, group 1 W2 = 128
    calls_by_hand = [("call", (68,)), ("call", (144, 128))] * STEPS
    from tag.deploy.p2p_collectives import SCATTER_TAG, ZERO_GATHER_TAG

    for z, gathers in ((2, 1 * STEPS), (3, 6 * STEPS + 3)):
        ranks = [torch.load(os.path.join(tmp_path, f"zero{z}_{r}.pt")) for r in range(2)]
        assert_ranks_match_reference(ranks, ref_losses, ref_params, f"zero{z}")
        for r in ranks:
            log = r["log"]
            assert [e for e in log if e[0] == "call"] == calls_by_hand, z
            scatter_batches = [e[2] for e in log if e[:2] == ("batch", SCATTER_TAG)]
            assert scatter_batches == [1, 2] * STEPS, z  # one batch per call; one message per unit sent
            assert sum(1 for e in log if e[:2] == ("batch", ZERO_GATHER_TAG)) == gathers, z
