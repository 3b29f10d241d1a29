"""Gradient sums over point-to-point messages, for CPU ranks (gloo).

gloo runs its collectives (``all_reduce``, ``reduce``, ``broadcast``) on worker threads of the process group: the
calling thread hands the work over and sleeps until it is done, two thread wake-ups per call. With as many
busy ranks as cores those wake-ups wait for a core: measured on the 2-core VM these tools are developed on
(2 ranks, 2 ms of compute before each call, 55 calls), a 1 KiB ``all_reduce`` took 0.48-1.59 ms median and
1.6-2.1 ms mean (slowest 9.6 ms), the same sum as one ``isend``/``irecv`` exchange 0.20 ms median and 0.52 ms
mean; at 3 MiB 2.2 vs 1.6 ms median. Point-to-point calls run on the calling thread.

`server_sum` (the ``ps`` algorithm): every other rank sends its buffer to the server, which adds them in rank
order and sends the total back, so all ranks end with the same bits.

`tree_sum` (the ``tree`` algorithm): a binary tree over the ranks in order (rank index i has children 2i+1 and
2i+2): each node adds its children's partial sums to its own (left child first) and sends the result to its
parent; the root's total goes back down the same tree. log2(n) steps each way, every rank ends with the root's
bits. (NCCL's double binary tree splits the buffer over two such trees so every rank sends and receives at full
rate; one tree sums the same values.)

`machine_scatter_sum` and `machine_gather` are the inside-a-machine halves of the ``hierarchical`` algorithm (and,
over a ZeRO unit's ranks, ZeRO's reduce-scatter and all-gather on CPU ranks, `tag.deploy.zero`): a
reduce-scatter of k contiguous shards (k = the fewest ranks any machine has in the set) to the machine's first k
ranks, and the all-gather of those shards back to every rank of the machine; between them the runtime all-reduces
shard j across machines (`tag.deploy.comm`). torch's gloo backend has no reduce-scatter; these are direct
messages (each rank sends each shard to its owner), one step each way inside a machine.

The ``ring`` algorithm stays gloo's ring: a ring of whole-chunk point-to-point exchanges was tried and ran mlp's replicated plans faster on
loopback (dp-even 13.1-16.3 -> 11.8 ms) but took 615 ms instead of 295 on the emulated cluster's shaped
100 Mbit/s link, where both directions of a 2-rank ring are busy at once (not diagnosed further; likely each
direction's acknowledgements queue behind the other's data in the shaper's queue), so it was not kept.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

TAG = 7_000_000  # message tag of the sums (the runtime's exchanges use small tags; each pair's messages stay ordered)
SCATTER_TAG = TAG + 3  # reduce-scatters (hierarchical's first step, ZeRO 2-3's gradients; on the sync thread)
ZERO_GATHER_TAG = TAG + 5  # ZeRO's weight gathers on CPU ranks (main thread; the sums above run on the sync thread)


def _wait(works) -> None:
    for w in works:
        w.wait()


def _post_all(sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]], tag: int) -> None:
    """Post every (tensor, peer) send and receive as one batch and wait for all of them (NCCL needs a batch for
    sends and receives that depend on each other; gloo runs them one by one)."""
    ops = [dist.P2POp(dist.isend, t, peer, tag=tag) for t, peer in sends]
    ops += [dist.P2POp(dist.irecv, t, peer, tag=tag) for t, peer in recvs]
    if ops:
        _wait(dist.batch_isend_irecv(ops))


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


def tree_sum(flat: torch.Tensor, ranks: tuple[int, ...], me: int) -> None:
    """Sum `flat` in place over `ranks` (sorted) by a binary-tree reduce to ranks[0] and a broadcast back."""
    order = sorted(ranks)
    n = len(order)
    if n < 2:
        return
    i = order.index(me)
    kids = [order[c] for c in (2 * i + 1, 2 * i + 2) if c < n]
    parent = order[(i - 1) // 2] if i > 0 else None
    bufs = [torch.empty_like(flat) for _ in kids]
    _wait([dist.irecv(b, k, tag=TAG + 1) for b, k in zip(bufs, kids)])
    for b in bufs:
        flat.add_(b)
    if parent is not None:
        _wait([dist.isend(flat, parent, tag=TAG + 1)])
        _wait([dist.irecv(flat, parent, tag=TAG + 2)])
    _wait([dist.isend(flat, k, tag=TAG + 2) for k in kids])


def shard_bounds(numel: int, k: int) -> list[tuple[int, int]]:
    """k contiguous [start, end) shards of `numel` elements, sizes differing by at most one, larger first.

    >>> shard_bounds(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    base, extra = divmod(numel, k)
    out, pos = [], 0
    for j in range(k):
        size = base + (1 if j < extra else 0)
        out.append((pos, pos + size))
        pos += size
    return out


def machine_scatter_sum(flat: torch.Tensor, local: tuple[int, ...], k: int, me: int,
                        out: torch.Tensor | None = None) -> None:
    """Reduce-scatter inside one machine: local[j] (j < k) ends with shard j (`shard_bounds`) summed over `local`
    (in local order); the other shards of `flat` are left as they were. With `out` (ZeRO's reduce-scatter into a
    master shard's gradient, `tag.deploy.zero`), the owner's sum goes there instead and `flat` is left as it was:
    the first other rank's part is received straight into `out` and the rest added to it in local order (no
    buffer for 2 ranks; the same bits as the sum in local order, the first addition being commutative)."""
    post_scatter_sums([(flat, local, k, me, out)], SCATTER_TAG)


def scatter_messages(flat: torch.Tensor, local: tuple[int, ...], k: int, me: int, out: torch.Tensor | None = None):
    """(sends, receives, finish) of `machine_scatter_sum` on rank `me`: (slice of `flat`, peer) sends, (buffer,
    peer) receives, and the function that adds the received parts once every message has completed."""
    if len(local) < 2:
        return [], [], lambda: None
    bounds = shard_bounds(flat.numel(), k)
    li = local.index(me)
    sends = [(flat[a:b], local[j]) for j, (a, b) in enumerate(bounds) if j != li and b > a]
    a, b = bounds[li] if li < k else (0, 0)
    others = [r for r in local if r != me] if b > a else []
    got = {r: (out if out is not None and n == 0 else torch.empty_like(flat[a:b])) for n, r in enumerate(others)}

    def finish() -> None:
        if not got:
            return
        if out is not None:
            for r in local:
                if r != others[0]:
                    out.add_(flat[a:b] if r == me else got[r])
            return
        total = None
        for r in local:
            part = flat[a:b] if r == me else got[r]
            total = part.clone() if total is None else total.add_(part)
        flat[a:b].copy_(total)

    return sends, [(buf, r) for r, buf in got.items()], finish


def post_scatter_sums(items: list[tuple], tag: int) -> None:
    """Every (flat, local, k, me, out) `machine_scatter_sum` of `items` posted as one batch of messages and waited
    for together, then each one's additions: one rendezvous of the ranks instead of one per item (ZeRO 2-3's
    reduce-scatters of one plan bucket, `tag.deploy.zero`). Every rank must list the items it shares with a peer
    in the same order (messages of one pair and tag match in posting order)."""
    sends, recvs, finish = [], [], []
    for flat, local, k, me, out in items:
        s, r, f = scatter_messages(flat, local, k, me, out)
        sends += s
        recvs += r
        finish.append(f)
    _post_all(sends, recvs, tag)
    for f in finish:
        f()


def gather_messages(flat: torch.Tensor, local: tuple[int, ...], k: int,
                    me: int) -> tuple[list[tuple[torch.Tensor, int]], list[tuple[torch.Tensor, int]]]:
    """(sends, receives) of `machine_gather` on rank `me`: (slice of `flat`, peer) each; none with one rank."""
    if len(local) < 2:
        return [], []
    bounds = shard_bounds(flat.numel(), k)
    li = local.index(me)
    sends = []
    if li < k and bounds[li][1] > bounds[li][0]:
        a, b = bounds[li]
        sends = [(flat[a:b], r) for r in local if r != me]
    return sends, [(flat[a:b], local[j]) for j, (a, b) in enumerate(bounds) if j != li and b > a]


def post_gathers(gathers: list[tuple[torch.Tensor, tuple[int, ...], int, int]], tag: int) -> None:
    """Every (flat, local, k, me) `machine_gather` of `gathers` posted as one batch and waited for together: one
    rendezvous of the ranks instead of one per gather (ZeRO 1-2's gathers after the step, `tag.deploy.zero`). Every
    rank must list the gathers it shares with a peer in the same order (messages of one pair and tag match in
    posting order)."""
    sends, recvs = [], []
    for flat, local, k, me in gathers:
        s, r = gather_messages(flat, local, k, me)
        sends += s
        recvs += r
    _post_all(sends, recvs, tag)


def machine_gather(flat: torch.Tensor, local: tuple[int, ...], k: int, me: int, tag: int = TAG + 4) -> None:
    """All-gather inside one machine: local[j] (j < k) sends its shard j to every other rank of the machine (`tag`:
    the messages' tag; ZeRO's gathers, issued from the main thread, use their own, `ZERO_GATHER_TAG`)."""
    post_gathers([(flat, local, k, me)], tag)
