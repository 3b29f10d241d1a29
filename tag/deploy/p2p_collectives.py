"""Gradient sums over point-to-point messages, for CPU ranks (gloo).

gloo runs its collectives (``all_reduce``, ``reduce``, ``broadcast``) on worker threads of the process group: the
calling thread hands the work over and sleeps until it is done, two thread wake-ups per call. With as many
busy ranks as cores those wake-ups wait for a core: measured on the 2-core VM these tools are developed on
(2 ranks, 2 ms of compute before each call, 55 calls), a 1 KiB ``all_reduce`` took 0.48-1.59 ms median and
1.6-2.1 ms mean (slowest 9.6 ms), the same sum as one ``isend``/``irecv`` exchange 0.20 ms median and 0.52 ms
mean; at 3 MiB 2.2 vs 1.6 ms median. Point-to-point calls run on the calling thread.

`server_sum` (the ``ps`` method): every other rank sends its buffer to the server, which adds them in rank
order and sends the total back, so all ranks end with the same bits. The ``allreduce`` method stays gloo's
ring: a ring of whole-chunk point-to-point exchanges was tried and ran mlp's replicated plans faster on
loopback (dp-even 13.1-16.3 -> 11.8 ms) but took 615 ms instead of 295 on the emulated cluster's shaped
100 Mbit/s link, where both directions of a 2-rank ring are busy at once (not diagnosed further; likely each
direction's acknowledgements queue behind the other's data in the shaper's queue), so it was not kept.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

TAG = 7_000_000  # message tag of the sums (the runtime's exchanges use small tags; each pair's messages stay ordered)


def _wait(works) -> None:
    for w in works:
        w.wait()


def server_sum(flat: torch.Tensor, ranks: tuple[int, ...], server: int, me: int) -> None:
    """Sum `flat` in place over `ranks` through `server` (one of them): sends in, total back."""
    others = [r for r in sorted(ranks) if r != server]
    if not others:
        return
    if me != server:
        _wait([dist.isend(flat, server, tag=TAG)])
        _wait([dist.irecv(flat, server, tag=TAG)])
        return
    bufs = [torch.empty_like(flat) for _ in others]
    _wait([dist.irecv(b, r, tag=TAG) for b, r in zip(bufs, others)])
    for b in bufs:
        flat.add_(b)
    _wait([dist.isend(flat, r, tag=TAG) for r in others])
