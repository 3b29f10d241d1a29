"""Chain fusion: an exact reduction of a `TaskGraph` (`tag.sim.taskgraph`) before the event loop.

A device's compute stream runs its program in order, so two consecutive tasks c, k of one program run back to
back (k starts when c ends) unless something from outside arrives for k. c can be folded into k when:

* k waits for no transfer or sync (``inputs[k] == 0``) and lasts ``>= 0`` ms, so k starts exactly when c ends
  and ends no earlier;
* c starts no transfer, and every sync unit c's end counts towards (``first_sync[c]`` and the SYNC entries of
  ``dependents[c]``) also counts k's end: such a sync cannot become ready before k has ended, and its ready
  time is the max over the ends of the tasks it waits for, so c's listings change neither that time nor the
  instant the sync is queued (the loop queues a sync when its last listed task is run, which is never c).

A **chain** is a maximal run of a program in which every consecutive pair can be folded. It becomes one task
under the id of its first task (the **head**, which keeps the head's inputs): duration the sum of the members'
durations, ``first_sync`` and ``dependents`` those of its last task; programs list heads only; every sync drops
its listings of non-last members and lists a last member by its head; transfers that wait for a last member wait
for its head. Task ids are kept, so deliveries, releases and every per-task list stay valid.

With durations d_1..d_n and the chain started at s, the unfused loop ends member i at (..(s + d_1) + ..) + d_i;
`run_fused` has the chain's stream add d_1, .., d_n one by one too, so the chain ends at the same float, every sync's
ready time, transfer start and stream end is bit-identical, and so is the order in which the loop queues events:
the fused result equals the unfused one exactly (the simulator is not continuous at the 1e-9 level: a flow within
1e-9 of its volume counts as drained, so rounding the sum differently could move the iteration time by more).
The fused task's ``duration_ms`` is the sum, for readers other than the loop; busy time and memory do not read the
timeline. Member i starts at s + d_1 + .. + d_{i-1} (`member_starts_ms`).
The trace shows every task, so `tag.sim.engine` runs the unfused graph when a trace is asked for.

Example: one device, forwards f0 f1, backwards b1 b0 both counting towards sync 0 (one bucket), the optimizer
step u released by sync 0: the program [f0, f1, b1, b0, u] fuses to [f0, u] with f0 lasting f0 + f1 + b1 + b0
and counting towards sync 0 once.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from tag.sim.events import Timeline, run_task_graph
from tag.sim.taskgraph import ComputeTasks, DependentKind, SyncUnit, TaskGraph, Transfer

_SYNC = DependentKind.SYNC


@dataclass
class FusedGraph:
    """A fused task graph and its chains: ``heads[i]`` / ``lasts[i]`` are the first and last task of the i-th
    chain of two or more tasks (a task in no such chain is its own one-task chain), ``member_ms`` per task id
    None or, for such a chain's head, its members' durations in program order (`run_fused`), ``n_fused`` how
    many tasks were folded away."""

    graph: TaskGraph
    heads: list[int]
    lasts: list[int]
    member_ms: list[tuple[float, ...] | None] | None
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
    """Whether c can be folded into its successor k when either has dependents (the module's second rule)."""
    fed_c = _syncs_fed(tg, c)
    if fed_c is None:
        return False
    if not fed_c:
        return True
    fed_k = set() if tg.first_sync[k] < 0 else {tg.first_sync[k]}
    fed_k.update(j for what, j in tg.dependents[k] or () if what is _SYNC)
    return fed_c <= fed_k


def fuse_chains(tg: TaskGraph) -> FusedGraph:
    """The task graph with every chain folded into one task (module docstring); the input is not modified."""
    n = len(tg.tasks)
    lens = [len(p) for p in tg.programs]
    n_prog = sum(lens)
    dur_l = tg.tasks.duration_ms
    if n_prog < 2 or min(dur_l) < 0:  # a negative duration would end a member after its chain's last task
        return FusedGraph(tg, [], [], None, 0)
    order = np.fromiter(chain.from_iterable(tg.programs), dtype=np.int64, count=n_prog)
    inputs = np.fromiter(tg.inputs, dtype=np.int64, count=n)[order]
    first = np.fromiter(tg.first_sync, dtype=np.int64, count=n)[order]
    has_dep = np.not_equal(np.fromiter(tg.dependents, dtype=object, count=n), None)[order]
    # pair (i-1, i) of `order`: i may take its predecessor if it is not a program's first task and waits for
    # nothing; without dependents on either side the sync rule reads first_sync only
    starts = np.cumsum([0] + lens[:-1])
    can = inputs == 0
    can[starts[np.asarray(lens) > 0]] = False
    can[0] = False
    prev_dep, prev_first = np.r_[False, has_dep[:-1]], np.r_[-1, first[:-1]]
    plain = ~prev_dep & ~has_dep
    merge = can & plain & ((prev_first < 0) | (prev_first == first))
    for i in np.flatnonzero(can & ~plain).tolist():
        merge[i] = _foldable(tg, int(order[i - 1]), int(order[i]))
    n_fused = int(np.count_nonzero(merge))
    if n_fused == 0:
        return FusedGraph(tg, [], [], None, 0)
    head_pos = np.flatnonzero(~merge)
    last_pos = np.r_[head_pos[1:] - 1, n_prog - 1]
    multi = np.flatnonzero(last_pos > head_pos)
    heads = order[head_pos[multi]].tolist()
    lasts = order[last_pos[multi]].tolist()
    dur = np.fromiter(dur_l, dtype=float, count=n)[order]
    sums = np.add.reduceat(dur, head_pos)[multi].tolist()
    dur_in_order = dur.tolist()
    member_ms: list = [None] * n

    durations, first_sync, dependents = list(dur_l), list(tg.first_sync), list(tg.dependents)
    for h, l, ms, a, b in zip(heads, lasts, sums, head_pos[multi].tolist(), last_pos[multi].tolist()):
        durations[h] = ms
        member_ms[h] = tuple(dur_in_order[a:b + 1])
        first_sync[h] = first_sync[l]
        dependents[h] = dependents[l]
    is_last = np.ones(n, dtype=bool)  # the last task of its chain (a one-task chain's task included)
    is_last[order[:-1][merge[1:]]] = False
    head_of_dev = np.searchsorted(head_pos, np.r_[starts, n_prog]).tolist()
    all_heads = order[head_pos].tolist()
    programs = [all_heads[head_of_dev[d]:head_of_dev[d + 1]] for d in range(len(lens))]
    head_of = dict(zip(lasts, heads))
    t = tg.tasks
    tasks = ComputeTasks(t.device, t.kind, t.group, durations)
    fused = TaskGraph(tg.n_devices, tasks, programs, _transfers(tg.transfers, head_of),
                      _syncs(tg.syncs, heads, lasts, is_last),
                      tg.inputs, first_sync, dependents, tg.memory, tg.batch_size)
    return FusedGraph(fused, heads, lasts, member_ms, n_fused)


def run_fused(fused: FusedGraph, link_caps_bytes_per_ms: list[float]) -> Timeline:
    """Run a fused graph (`tag.sim.events.run_task_graph`, each chain's stream adding its members' durations one
    by one): every time is bit-identical to the unfused run's; ``start_ms`` holds the heads' starts
    (`member_starts_ms` gives every task's)."""
    return run_task_graph(fused.graph, link_caps_bytes_per_ms, member_ms=fused.member_ms)


def _syncs(units: list[SyncUnit], heads: list[int], lasts: list[int], is_last: np.ndarray) -> list[SyncUnit]:
    """Copies of the sync units that list each chain's last task by its head and drop the other members."""
    counts = [len(u.wait) for u in units]
    flat = np.fromiter(chain.from_iterable(u.wait for u in units), dtype=np.int64, count=sum(counts))
    rename = np.arange(len(is_last), dtype=np.int64)
    rename[lasts] = heads
    keep = is_last[flat]
    mapped = rename[flat]
    bounds = np.r_[0, np.cumsum(counts)].tolist()
    out = []
    for j, u in enumerate(units):
        a, b = bounds[j], bounds[j + 1]
        wait = mapped[a:b][keep[a:b]].tolist()
        out.append(SyncUnit(u.groups, u.devices, u.nbytes, u.method, u.server, u.label, wait, u.release, u.phases,
                            u.copy_in_ms, u.copy_out_ms))
    return out


def _transfers(transfers: list[Transfer], head_of: dict[int, int]) -> list[Transfer]:
    """The transfers, each that waits for a chain's last member waiting for the chain's head instead."""
    out = transfers
    for i, x in enumerate(transfers):
        if any(k in head_of for k in x.wait):
            if out is transfers:
                out = list(transfers)
            out[i] = Transfer(x.spec, x.producer, x.consumer, tuple(head_of.get(k, k) for k in x.wait), x.deliver,
                              x.label)
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
