"""Chain fusion: an exact reduction of a `TaskGraph` (`tag.sim.taskgraph`) before the event loop.

A device's compute stream runs its program in order, so consecutive tasks run back to back unless something
from outside arrives for one of them. A run k_1 .. k_n of one program is a **chain** that can be folded into one
task when

* k_2 .. k_n wait for no transfer or sync (``inputs == 0``) and every duration is ``>= 0``, so each starts
  exactly when its predecessor ends and k_n ends last;
* k_1 .. k_{n-1} start no transfer, and every sync unit one of them counts towards (``first_sync`` and the SYNC
  entries of ``dependents``) also counts k_n's end: such a sync cannot become ready before k_n has ended, its
  ready time is the max over the ends of the tasks it waits for, and the loop queues it when its last listed task
  is run, which is never one of k_1 .. k_{n-1} (k_n still has to count); so the other members' listings change
  neither the time nor the order of anything the loop does.

`fuse_chains` cuts each program into such chains: between tasks that wait for an input, after tasks that start
a transfer, and, for tasks without further dependents, so that the tasks of a chain feed one sync unit and the
chain ends at the last of them (backwards of groups without parameters fold into their bucket's chain; a run
that feeds nothing after the last feeder is a chain of its own); a pair where either task has further dependents
is folded when the first's syncs are among the second's. A chain becomes one task under the id of its first task
(the **head**, which keeps the head's inputs): ``first_sync`` and ``dependents`` those of its last task; programs
list heads only; every sync drops its listings of non-last members and lists a last member by its head;
transfers that wait for a last member wait for its head. Task ids are kept, so deliveries, releases and every
per-task list stay valid.

With durations d_1..d_n and the chain started at s, the unfused loop ends member i at (..(s + d_1) + ..) + d_i;
`run_fused` has the chain's stream add d_1, .., d_n one by one too, so the chain ends at the same float, every sync's
ready time, transfer start and stream end is bit-identical, and so is the order in which the loop queues events:
the fused result equals the unfused one exactly (the simulator is not continuous at the 1e-9 level: a flow within
1e-9 of its volume counts as drained, so rounding the sum differently could move the iteration time by more).
The fused task's ``duration_ms`` is the sum, for readers other than the loop; busy time and memory do not read the
timeline. Member i starts at s + d_1 + .. + d_{i-1} (`member_starts_ms`).
The trace shows every task, so `tag.sim.engine` runs the unfused graph when a trace is asked for.

Example: one device, forwards f0 f1 f2, backwards b2 b1 b0 where b2 and b0 count towards sync 0 (one bucket) and
group 1 has no parameters, the optimizer step u released by sync 0: the program [f0, f1, f2, b2, b1, b0, u] fuses
to [f0, u], f0 lasting f0 + f1 + f2 + b2 + b1 + b0 and counting towards sync 0 once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from itertools import chain
from operator import attrgetter

import numpy as np

from tag.sim.events import Timeline, run_task_graph
from tag.sim.taskgraph import DependentKind, SyncUnit, TaskGraph, Transfer

_SYNC = DependentKind.SYNC


@dataclass
class FusedGraph:
    """A fused task graph and its chains: ``heads[i]`` / ``lasts[i]`` are the first and last task of the i-th
    chain of two or more tasks (a task in no such chain is its own one-task chain), ``member_ms`` maps such a
    chain's head to its members' durations in program order (`run_fused`), ``n_fused`` how many tasks were folded
    away."""

    graph: TaskGraph
    heads: list[int]
    lasts: list[int]
    member_ms: dict[int, tuple[float, ...]] | None
    n_fused: int


def _syncs_fed(tg: TaskGraph, k: int) -> set[int] | None:
    """The sync units task k's end counts towards, or None if it also starts a transfer."""
    out = set()
    if tg.first_sync[k] >= 0:
        out.add(tg.first_sync[k])
    for what, j in tg.dependents[k] or ():
        if what is not _SYNC:
            return None
        out.add(j)
    return out


def _foldable(tg: TaskGraph, c: int, k: int) -> bool:
    """Whether c (the last task of a chain) can be folded into its successor k: c starts no transfer and its
    syncs are among k's."""
    fed_c = _syncs_fed(tg, c)
    if fed_c is None:
        return False
    if not fed_c:
        return True
    fed_k = set() if tg.first_sync[k] < 0 else {tg.first_sync[k]}
    fed_k.update(j for what, j in tg.dependents[k] or () if what is _SYNC)
    return fed_c <= fed_k


def _merge_flags(tg: TaskGraph, order: np.ndarray, lens: list[int]) -> np.ndarray:
    """merge[i]: position i of `order` (the programs concatenated) belongs to the chain of position i - 1."""
    n = len(tg.tasks)
    inputs = np.fromiter(tg.inputs, dtype=np.int64, count=n)[order]
    first = np.fromiter(tg.first_sync, dtype=np.int64, count=n)[order]
    has_dep = np.fromiter(map(bool, tg.dependents), dtype=bool, count=n)[order]
    starts = np.cumsum([0] + lens[:-1])
    hard = inputs > 0  # a cut before i, whatever else holds
    hard[starts[np.asarray(lens) > 0]] = True
    hard[0] = True
    dep_pair = np.r_[False, has_dep[:-1] | has_dep[1:]]
    merge = ~hard & ~dep_pair
    # inside a segment of plain pairs: cut after a feeder when the segment's next feeder feeds another sync or
    # no further feeder follows in the segment
    seg = np.cumsum(~merge)
    feeders = np.flatnonzero(first >= 0)
    if len(feeders):
        nxt = np.r_[feeders[1:], feeders[-1]]  # the next feeder (the last: itself, never "the same")
        same_next = (nxt > feeders) & (seg[nxt] == seg[feeders]) & (first[nxt] == first[feeders])
        cut = feeders[~same_next] + 1
        cut = cut[cut < len(order)]
        merge[cut[seg[cut] == seg[cut - 1]]] = False  # only inside a segment (else already cut)
    for i in np.flatnonzero(~hard & dep_pair).tolist():
        merge[i] = _foldable(tg, int(order[i - 1]), int(order[i]))
    return merge


def fuse_chains(tg: TaskGraph) -> FusedGraph:
    """The task graph with every chain folded into one task (module docstring); the input is not modified."""
    n = len(tg.tasks)
    lens = [len(p) for p in tg.programs]
    n_prog = sum(lens)
    dur_l = tg.tasks.duration_ms
    if n_prog < 2 or min(dur_l) < 0:  # a negative duration would end a member after its chain's last task
        return FusedGraph(tg, [], [], None, 0)
    order = np.fromiter(chain.from_iterable(tg.programs), dtype=np.int64, count=n_prog)
    merge = _merge_flags(tg, order, lens)
    n_fused = int(np.count_nonzero(merge))
    if n_fused == 0:
        return FusedGraph(tg, [], [], None, 0)
    head_pos = np.flatnonzero(~merge)
    last_pos = np.r_[head_pos[1:] - 1, n_prog - 1]
    multi = np.flatnonzero(last_pos > head_pos)
    heads = order[head_pos[multi]].tolist()
    lasts = order[last_pos[multi]].tolist()
    in_multi = np.repeat(last_pos > head_pos, np.diff(np.r_[head_pos, n_prog]))
    member_dur = np.fromiter(dur_l, dtype=float, count=n)[order[in_multi]]  # multi chains' members in order
    bounds = np.cumsum(np.r_[0, (last_pos - head_pos + 1)[multi]]).tolist()
    md = member_dur.tolist()
    member_tuples = list(map(tuple, map(md.__getitem__, map(slice, bounds[:-1], bounds[1:]))))
    sums = np.add.reduceat(member_dur, bounds[:-1]).tolist() if heads else []

    durations, first_sync, dependents = list(dur_l), list(tg.first_sync), list(tg.dependents)
    for h, l, ms in zip(heads, lasts, sums):
        durations[h] = ms
        first_sync[h] = first_sync[l]
        dependents[h] = dependents[l]
    is_last = np.ones(n, dtype=bool)  # the last task of its chain (a one-task chain's task included)
    is_last[order[:-1][merge[1:]]] = False
    head_of_dev = np.searchsorted(head_pos, np.r_[np.cumsum([0] + lens[:-1]), n_prog]).tolist()
    all_heads = order[head_pos].tolist()
    programs = [all_heads[head_of_dev[d]:head_of_dev[d + 1]] for d in range(len(lens))]
    tasks = replace(tg.tasks, duration_ms=durations)
    transfers = _transfers(tg.transfers, dict(zip(lasts, heads))) if tg.transfers else tg.transfers
    fused = replace(tg, tasks=tasks, programs=programs, transfers=transfers,
                    syncs=_syncs(tg.syncs, heads, lasts, is_last), first_sync=first_sync, dependents=dependents)
    return FusedGraph(fused, heads, lasts, dict(zip(heads, member_tuples)), n_fused)


def run_fused(fused: FusedGraph, link_caps_bytes_per_ms: list[float]) -> Timeline:
    """Run a fused graph (`tag.sim.events.run_task_graph`, each chain's stream adding its members' durations one
    by one): every time is bit-identical to the unfused run's; ``start_ms`` holds the heads' starts
    (`member_starts_ms` gives every task's)."""
    return run_task_graph(fused.graph, link_caps_bytes_per_ms, member_ms=fused.member_ms)


def _syncs(units: list[SyncUnit], heads: list[int], lasts: list[int], is_last: np.ndarray) -> list[SyncUnit]:
    """The sync units listing each chain's last task by its head and dropping the other members: a unit whose
    listing does not change is kept as it is, the others are copies with the new ``wait``."""
    counts = [len(u.wait) for u in units]
    flat = np.fromiter(chain.from_iterable(u.wait for u in units), dtype=np.int64, count=sum(counts))
    rename = np.arange(len(is_last), dtype=np.int64)
    rename[lasts] = heads
    keep = is_last[flat]
    mapped = rename[flat]
    bounds = np.zeros(len(units) + 1, dtype=np.int64)
    bounds[1:] = np.cumsum(counts, dtype=np.int64)
    kept_bounds = _prefix_counts(keep)[bounds].tolist()  # the kept listings' bounds per unit
    changed = _prefix_counts(~keep | (mapped != flat))[bounds]
    changed = (changed[1:] > changed[:-1]).tolist()
    kept = mapped[keep].tolist()
    out = []
    for j, u in enumerate(units):
        if not changed[j]:
            out.append(u)
            continue
        values = list(_sync_fields(u))  # `dataclasses.replace(u, wait=...)`, without its per-field Python loop
        values[_WAIT_FIELD] = kept[kept_bounds[j]:kept_bounds[j + 1]]
        out.append(SyncUnit(*values))
    return out


def _prefix_counts(flags: np.ndarray) -> np.ndarray:
    """c[i] = how many of flags[:i] are true, for i = 0..len(flags)."""
    out = np.zeros(len(flags) + 1, dtype=np.int64)
    np.cumsum(flags, out=out[1:])
    return out


_SYNC_FIELD_NAMES = [f.name for f in fields(SyncUnit)]  # every field is an __init__ argument, in this order
_sync_fields = attrgetter(*_SYNC_FIELD_NAMES)
_WAIT_FIELD = _SYNC_FIELD_NAMES.index("wait")


def _transfers(transfers: list[Transfer], head_of: dict[int, int]) -> list[Transfer]:
    """The transfers, each that waits for a chain's last member waiting for the chain's head instead."""
    out = transfers
    heads = head_of.keys()
    for i, x in enumerate(transfers):
        if not heads.isdisjoint(x.wait):
            if out is transfers:
                out = list(transfers)
            out[i] = replace(x, wait=tuple(head_of.get(k, k) for k in x.wait))
    return out


def member_starts_ms(fused: FusedGraph, original: TaskGraph, start_ms: list[float]) -> list[float]:
    """Every original task's start (ms) from the fused run's starts: a chain's member i starts at its head's
    start plus the durations of members 1..i-1."""
    out = list(start_ms)
    dur = original.tasks.duration_ms
    last_of = dict(zip(fused.heads, fused.lasts))
    for prog in original.programs:
        t, chain_last = 0.0, None
        for k in prog:
            if chain_last is None:  # k heads a chain (or is a chain of its own)
                t = start_ms[k]
                chain_last = last_of.get(k, k)
            out[k] = t
            t += dur[k]
            if k == chain_last:
                chain_last = None
    return out
