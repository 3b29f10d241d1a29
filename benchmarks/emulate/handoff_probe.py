"""Handoff latency under load: what a rank pays to resume after waiting for a peer, in ms.

    python -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/emulate/handoff_probe.py OUT.json [WORK_MS]

Two ranks pass a small token back and forth; before passing it on, each computes WORK_MS of thread CPU
time (default 2 ms), as training ranks do between messages. The waiting rank sleeps in gloo; on a machine
shared with other tenants its core goes to someone else, and it resumes only when the scheduler gives a
core back. Per handoff: (round-trip wall - both sides' measured compute wall) / 2. `tag profile links`
measures ping-pong with both ranks hot (no compute between messages), which does not see this delay.
Writes {"handoff_ms": median, "handoff_min_ms": min, "hot_ms": median with no compute, "compute_stretch":
median wall / thread CPU time of the compute between handoffs, "compute_stretch_by_rank": the same per
rank, "sustained_stretch_by_rank": wall / CPU time of 40 ms of compute on all ranks at once (what a CPU
quota or a busy machine does to long compute), per rank, "alone_stretch_by_rank": the same with one rank
computing while the others sleep}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def main(out: str, work_ms: float = 2.0) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    r = dist.get_rank()
    tok = torch.zeros(256)
    a = torch.randn(128, 128)

    def work(ms: float) -> float:
        t, w = time.thread_time(), time.perf_counter()
        while (time.thread_time() - t) * 1e3 < ms:
            a @ a
        return (time.perf_counter() - w) * 1e3

    stretch = []

    def trial(ms: float) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        spent = 0.0
        if r == 0:
            spent += work(ms)
            dist.send(tok, 1)
            dist.recv(tok, 1)
        else:
            dist.recv(tok, 0)
            spent += work(ms)
            dist.send(tok, 0)
        wall = (time.perf_counter() - t0) * 1e3
        if ms > 0:
            stretch.append(spent / ms)
        s = torch.tensor([spent], dtype=torch.float64)
        dist.all_reduce(s)
        return (wall - float(s)) / 2

    hot = [trial(0.0) for _ in range(30)]
    loaded = [trial(work_ms) for _ in range(40)]
    sustained = []
    for _ in range(5):  # both ranks compute 40 ms at once, as data-parallel ranks do
        dist.barrier()
        sustained.append(work(40.0) / 40.0)
    alone = []
    for i in range(dist.get_world_size()):  # one rank computes 40 ms while the others sleep in a receive
        for _ in range(3):
            dist.barrier()
            if r == i:
                alone.append(work(40.0) / 40.0)
                for j in range(dist.get_world_size()):
                    if j != i:
                        dist.send(tok, j)
            else:
                dist.recv(tok, i)
    mine = torch.tensor([statistics.median(stretch), statistics.median(sustained), statistics.median(alone)],
                        dtype=torch.float64)
    every = [torch.zeros(3, dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    if r == 0:
        with open(out, "w") as f:
            json.dump({"handoff_ms": statistics.median(loaded), "handoff_min_ms": min(loaded),
                       "hot_ms": statistics.median(hot), "work_ms": work_ms,
                       "compute_stretch": statistics.median(stretch),
                       "compute_stretch_by_rank": [float(t[0]) for t in every],
                       "sustained_stretch_by_rank": [float(t[1]) for t in every],
                       "alone_stretch_by_rank": [float(t[2]) for t in every]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 2.0)
