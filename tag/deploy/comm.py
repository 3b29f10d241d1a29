"""Collectives the per-rank runtime uses, over torch.distributed (gloo on CPU, NCCL on GPU).

`Comm` creates every sub-group the schedule needs up front (all ranks must call ``new_group`` in the same
order) and offers: a point-to-point `exchange`, the gradient sync algorithms of `tag.strategy.SYNC_METHODS`
and an uneven `all_gather_rows` for sufficient factors:

* ``ring``: the backend's all-reduce over the replicas (gloo's and NCCL's ring);
* ``tree``: a binary-tree reduce to the first replica and broadcast back (`p2p_collectives.tree_sum`);
* ``hierarchical``: reduce-scatter of k shards inside each machine (k = the fewest replicas any machine has),
  all-reduce of shard j across the machines' j-th replicas, all-gather inside each machine (the two inside
  steps as point-to-point messages, `p2p_collectives.machine_scatter_sum` / `machine_gather`);
* ``leader``: reduce to each machine's first replica, all-reduce across those leaders, broadcast back;
* ``ps``: reduce to the server, broadcast back (on CPU ranks as point-to-point messages, `server_sum`: gloo's
  reduce and broadcast pay thread wake-ups on a busy machine).

Every algorithm is a sum: replicas' row-weighted contributions add up to the full-batch gradient; they differ
only in the order of the additions.

`start_sum` starts a sum without waiting for it (the runtime overlaps gradient syncs with the rest of the backward,
as DDP does). On CPU ranks every started sum goes to one background thread per `Comm`, which issues them in the
order they were started: ``ring`` as gloo's asynchronous all-reduce (the thread does not wait for it), the
point-to-point algorithms run there to completion (gloo's isend/irecv handles never report completion before
``wait``, so they cannot be polled from the main thread). One thread and one order per rank keeps the collectives of
every process group in the same order on all its ranks. On GPU ranks ``ring`` is NCCL's asynchronous all-reduce and
the other algorithms run at once on the calling thread (NCCL's point-to-point calls must not race on one
communicator). Whoever starts sums waits for all of them (`SumHandle.wait`) before any collective of its own.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterable

import torch
import torch.distributed as dist

from tag.deploy.p2p_collectives import machine_gather, machine_scatter_sum, server_sum, shard_bounds, tree_sum


class Comm:
    """Process-group helper for rank `rank` of `world` ranks; `rank_machine[r]` is rank r's machine."""

    def __init__(self, rank: int, world: int, rank_machine: list[str], rank_sets: Iterable[tuple[int, ...]],
                 device: torch.device | str = "cpu", shard_sets: Iterable[tuple[int, ...]] = ()):
        self.rank, self.world, self.rank_machine = rank, world, rank_machine
        self.device = torch.device(device)
        self._groups: dict[tuple[int, ...], object] = {}
        self._shard_groups: dict[tuple[int, ...], object] = {}
        self._issuer: ThreadPoolExecutor | None = None  # the sync thread of `start_sum`, started on first use
        if world > 1:
            for ranks in sorted({tuple(sorted(s)) for s in rank_sets if len(s) > 1}):
                if len(ranks) == world:
                    self._groups[ranks] = dist.group.WORLD
                else:
                    self._groups[ranks] = dist.new_group(list(ranks))
            for ranks in sorted({tuple(sorted(s)) for s in shard_sets if len(s) > 1}):
                self._shard_groups[ranks] = dist.new_group(list(ranks))

    @staticmethod
    def needed_sets(buckets, sfb_ops, rank_machine: list[str]) -> list[tuple[int, ...]]:
        """Every rank set a collective of the schedule runs on (to create the groups identically everywhere)."""
        out = [tuple(range(len(rank_machine)))]
        for b in buckets:
            out.append(b.ranks)
            if b.method == "leader":
                out += list(_machine_sets(b.ranks, rank_machine).values())
                out.append(tuple(sorted(s[0] for s in _machine_sets(b.ranks, rank_machine).values())))
            elif b.method == "hierarchical":
                out += _cross_sets(b.ranks, rank_machine)
        out += [s.ranks for s in sfb_ops]
        return out

    def start_sum(self, flat: torch.Tensor, method: str, ranks: tuple[int, ...], server: int | None) -> "SumHandle":
        """Start `sum_over(flat, method, ranks, server)`; `flat` must not be touched until the handle's ``wait``."""
        if len(ranks) < 2:
            return SumHandle()
        if self.device.type != "cpu":
            if method == "ring":
                return SumHandle(work=dist.all_reduce(flat, group=self.group(ranks), async_op=True))
            self.sum_over(flat, method, ranks, server)
            return SumHandle()
        if self._issuer is None:
            self._issuer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tag-sync")
        return SumHandle(future=self._issuer.submit(self._issue, flat, method, ranks, server))

    def _issue(self, flat: torch.Tensor, method: str, ranks: tuple[int, ...], server: int | None):
        """On the sync thread: gloo's ring all-reduce started (its work returned), any other algorithm run."""
        if method == "ring":
            return dist.all_reduce(flat, group=self.group(ranks), async_op=True)
        self.sum_over(flat, method, ranks, server)
        return None

    def run_ordered(self, issue) -> "SumHandle":
        """Run `issue()` (it issues collectives and returns an async work to wait for, or None) after every sum
        started so far: on CPU ranks on the sync thread once it exists, else at once. Collectives issued from the
        main thread while started sums run on the sync thread could reach the ranks in different orders."""
        if self._issuer is not None and self.device.type == "cpu":
            return SumHandle(future=self._issuer.submit(issue))
        return SumHandle(work=issue())

    def close(self) -> None:
        """Stop the sync thread (after every started sum was waited for)."""
        if self._issuer is not None:
            self._issuer.shutdown(wait=True)
            self._issuer = None

    def group(self, ranks: tuple[int, ...]):
        return self._groups[tuple(sorted(ranks))]

    def shard_group(self, ranks: tuple[int, ...]):
        """The process group of a sharded group's replica (`shard_sets`): its own, so the main thread's shard
        exchanges never interleave with the sync thread's sums on the same ranks."""
        return self._shard_groups[tuple(sorted(ranks))]

    def exchange(self, sends: list[tuple[int, torch.Tensor, int]], recvs: list[tuple[int, torch.Tensor, int]]) -> None:
        """Post every (peer, tensor, tag) send and receive, then wait for all of them."""
        works = [dist.isend(t.contiguous(), dst=peer, tag=tag) for peer, t, tag in sends]
        works += [dist.irecv(t, src=peer, tag=tag) for peer, t, tag in recvs]
        for w in works:
            w.wait()

    def sum_over(self, flat: torch.Tensor, method: str, ranks: tuple[int, ...], server: int | None) -> None:
        """Sum `flat` in place over `ranks` by `method`; every rank in `ranks` ends with the same total."""
        if len(ranks) < 2:
            return
        if self.device.type == "cpu" and method == "ps":  # gloo: point-to-point (p2p_collectives)
            server_sum(flat, ranks, server, self.rank)
            return
        if method == "ring":
            dist.all_reduce(flat, group=self.group(ranks))
        elif method == "tree":
            tree_sum(flat, ranks, self.rank)
        elif method == "ps":
            g = self.group(ranks)
            dist.reduce(flat, dst=server, group=g)
            dist.broadcast(flat, src=server, group=g)
        elif method == "hierarchical":
            self._hierarchical(flat, ranks)
        elif method == "leader":
            local = _machine_sets(ranks, self.rank_machine)[self.rank_machine[self.rank]]
            leader = local[0]
            if len(local) > 1:
                dist.reduce(flat, dst=leader, group=self.group(local))
            leaders = tuple(sorted(s[0] for s in _machine_sets(ranks, self.rank_machine).values()))
            if self.rank == leader and len(leaders) > 1:
                dist.all_reduce(flat, group=self.group(leaders))
            if len(local) > 1:
                dist.broadcast(flat, src=leader, group=self.group(local))
        else:
            raise ValueError(f"unknown sync method {method!r}")

    def _hierarchical(self, flat: torch.Tensor, ranks: tuple[int, ...]) -> None:
        """Reduce-scatter inside the machine, all-reduce of this rank's shard across machines, all-gather inside."""
        machines = _machine_sets(ranks, self.rank_machine)
        local = machines[self.rank_machine[self.rank]]
        k = min(len(s) for s in machines.values())
        machine_scatter_sum(flat, local, k, self.rank)
        li = local.index(self.rank)
        if li < k and len(machines) > 1:
            a, b = shard_bounds(flat.numel(), k)[li]
            if b > a:
                dist.all_reduce(flat[a:b], group=self.group(tuple(s[li] for s in machines.values())))
        machine_gather(flat, local, k, self.rank)

    def all_gather_rows(self, x: torch.Tensor, counts: list[int], ranks: tuple[int, ...]) -> torch.Tensor:
        """Concatenate along dim 0 the tensors of `ranks` (in rank order), rank i holding counts[i] rows."""
        if len(ranks) < 2:
            return x
        pad = max(counts)
        buf = torch.zeros((pad,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
        buf[: x.shape[0]] = x
        parts = [torch.empty_like(buf) for _ in ranks]
        dist.all_gather(parts, buf, group=self.group(ranks))
        return torch.cat([p[:n] for p, n in zip(parts, counts)], dim=0)

    def sum_scalar(self, value: float, op: str = "sum") -> float:
        """Sum (or max) a float over all ranks."""
        if self.world < 2:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return float(t.item())


class SumHandle:
    """A started sum: ``wait()`` returns once the buffer holds the total (re-raising the sync thread's error)."""

    __slots__ = ("future", "work")

    def __init__(self, future: Future | None = None, work=None):
        self.future, self.work = future, work

    def wait(self) -> None:
        if self.future is not None:
            self.work, self.future = self.future.result(), None
        if self.work is not None:
            self.work.wait()
            self.work = None


def _machine_sets(ranks: tuple[int, ...], rank_machine: list[str]) -> dict[str, tuple[int, ...]]:
    """Ranks of `ranks` grouped by machine, machines in order of their first rank."""
    out: dict[str, list[int]] = {}
    for r in sorted(ranks):
        out.setdefault(rank_machine[r], []).append(r)
    return {m: tuple(rs) for m, rs in out.items()}


def _cross_sets(ranks: tuple[int, ...], rank_machine: list[str]) -> list[tuple[int, ...]]:
    """The rank sets of `hierarchical`'s across-machine all-reduces: the j-th rank of every machine, j < k."""
    machines = list(_machine_sets(ranks, rank_machine).values())
    k = min(len(s) for s in machines)
    return [tuple(sorted(s[j] for s in machines)) for j in range(k)] if len(machines) > 1 else []
