"""Twin folding: an exact reduction of a `TaskGraph` (`tag.sim.taskgraph`) before chain fusion, for devices that run
the same program.

Data parallelism on many devices of few types builds one program per device, and most of them are copies: bert_large
on 1,024 GPUs of two types at dp-proportional's rows is two distinct programs, each run by 512 devices. Devices d and e are
**twins** when

* no transfer waits for, delivers to or carries data of a task of either (their tasks meet other devices' only in
  sync units);
* their programs have the same length and, position by position, the tasks have the same duration, the same count
  of inputs and the same first sync unit (``first_sync``);
* the sync units list them alike: the multiset of (sync unit, program position) over the ``wait`` listings of d's
  tasks equals e's, and likewise over the ``release`` listings.

`fold_twins` keeps the last device of each class of twins (its **representative**) and builds the graph of the
representatives' tasks alone (renumbered in task-id order; every sync unit keeps its devices, phases and copies, and
lists only those tasks). Why the run is unchanged: by induction over the loop's instants, twin tasks at one position
start and end at the same float. A task starts at max(its stream free, its last input), and its inputs are releases
of syncs that release the task at the same position on each twin, so they arrive together. A sync becomes ready at
the max over its listed tasks' ends; each twin listing it drops has an equal end at the same position on the
representative, which it still lists, so the max is the same float. Flows belong to sync phases and transfers, which
are kept, so link bytes and rates are the same; a stream's end is its representative's (`unfold_end_ms`). At one
instant the loop handles events first-queued first; a sync is queued when its last listing is counted, and with the
last device of each class as representative that listing is kept where the builder lists tasks in device order, as
it does. `tests/sim/test_sim_fold.py` compares the folded run with the unfolded one to the bit.

Two ways to the folded graph: `fold_twins` finds the twins in a whole built graph; `strategy_twins` reads classes off
the strategy (one device type, the same rows in every group, no message at either end), and the builder then makes
only the representatives' tasks (`tag.sim.build.build_task_graph`'s ``rep``), which is `fold_with` of the whole graph
by those classes without building it. What it saves: building, chain fusion and the event loop touch one program per
class instead of one per device; busy time is summed once per class (`tag.sim.engine.busy_ms`). Peak memory is
unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import chain

import numpy as np

from tag.sim.taskgraph import ComputeTasks, TaskGraph

MIN_DEVICES = 16  # below this, looking for twins costs about what it saves


def _listings(units, attr: str) -> tuple[np.ndarray, np.ndarray]:
    """(task ids, sync index) of every listing in the units' `attr` lists (``wait`` or ``release``), in order."""
    counts = np.fromiter((len(getattr(u, attr)) for u in units), dtype=np.int64, count=len(units))
    tasks = np.fromiter(chain.from_iterable(getattr(u, attr) for u in units), dtype=np.int64, count=int(counts.sum()))
    return tasks, np.repeat(np.arange(len(units), dtype=np.int64), counts)


def _per_device_keys(tasks: np.ndarray, syncs: np.ndarray, tdev: np.ndarray, pos: np.ndarray, length: int,
                     n_dev: int) -> list[bytes]:
    """For every device, its listings' (sync, position) pairs sorted, as bytes (equal bytes: equal multisets)."""
    dev = tdev[tasks]
    key = syncs * (length + 1) + pos[tasks]
    order = np.lexsort((key, dev))
    dev, key = dev[order], key[order]
    bounds = np.searchsorted(dev, np.arange(n_dev + 1))
    return [key[bounds[d]:bounds[d + 1]].tobytes() for d in range(n_dev)]


def twin_representatives(tg: TaskGraph) -> list[int] | None:
    """rep[d]: the representative of device d's class of twins (module docstring), rep[d] == d for a representative;
    None when no device has a twin."""
    tdev = np.fromiter(tg.tasks.device, dtype=np.int64, count=len(tg.tasks))
    return _representatives(tg, tdev, _listings(tg.syncs, "wait"), _listings(tg.syncs, "release"))


def _representatives(tg: TaskGraph, tdev: np.ndarray, wait, release) -> list[int] | None:
    """`twin_representatives`, given the task devices and the listings (`_listings`) of the sync units."""
    n_dev, n = tg.n_devices, len(tg.tasks)
    alone = set()  # devices a transfer touches: each its own class
    for x in tg.transfers:
        for k in chain(x.wait, x.deliver, (x.producer, x.consumer)):
            if k >= 0:
                alone.add(int(tdev[k]))
    lens = [len(p) for p in tg.programs]
    by_len: dict[int, list[int]] = {}
    for d, length in enumerate(lens):
        if d not in alone and length:
            by_len.setdefault(length, []).append(d)
    if all(len(devs) < 2 for devs in by_len.values()):
        return None
    dur = np.fromiter(tg.tasks.duration_ms, dtype=np.float64, count=n).view(np.int64)  # equal floats: equal bits
    inputs = np.fromiter(tg.inputs, dtype=np.int64, count=n)
    first = np.fromiter(tg.first_sync, dtype=np.int64, count=n)
    total = sum(lens)
    order = np.fromiter(chain.from_iterable(tg.programs), dtype=np.int64, count=total)
    starts = np.cumsum([0] + lens[:-1])
    pos = np.zeros(n, dtype=np.int64)  # each task's position in its device's program
    pos[order] = np.arange(total, dtype=np.int64) - np.repeat(starts, lens)
    width = max(lens)
    waits = _per_device_keys(*wait, tdev, pos, width, n_dev)
    releases = _per_device_keys(*release, tdev, pos, width, n_dev)
    rep = list(range(n_dev))
    found = False
    for length, devs in by_len.items():
        if len(devs) < 2:
            continue
        progs = order[(starts[devs][:, None] + np.arange(length)).ravel()].reshape(len(devs), length)
        rows = np.concatenate([dur[progs], inputs[progs], first[progs]], axis=1)
        keys = [(rows[i].tobytes(), waits[d], releases[d]) for i, d in enumerate(devs)]
        last = dict(zip(keys, devs))  # devices ascending: each class's last device
        for key, d in zip(keys, devs):
            rep[d] = last[key]
            found = found or rep[d] != d
    return rep if found else None


def fold_twins(tg: TaskGraph, min_devices: int = MIN_DEVICES) -> tuple[TaskGraph, list[int]] | None:
    """(the graph of the representatives' tasks, rep) where rep is `twin_representatives`; None when the graph has
    fewer than `min_devices` devices, is pipelined (its per-micro-batch fields stay with the unfolded graph) or no
    device has a twin. The input is not modified."""
    if tg.n_devices < min_devices or type(tg) is not TaskGraph:
        return None
    tdev = np.fromiter(tg.tasks.device, dtype=np.int64, count=len(tg.tasks))
    wait, release = _listings(tg.syncs, "wait"), _listings(tg.syncs, "release")
    rep = _representatives(tg, tdev, wait, release)
    if rep is None:
        return None
    return _fold(tg, rep, tdev, wait, release), rep


def fold_with(tg: TaskGraph, rep: list[int]) -> TaskGraph:
    """The graph of the tasks of the devices d with rep[d] == d (renumbered in task-id order; sync units list only
    those tasks): `fold_twins`'s graph for a given rep. The input is not modified."""
    tdev = np.fromiter(tg.tasks.device, dtype=np.int64, count=len(tg.tasks))
    return _fold(tg, rep, tdev, _listings(tg.syncs, "wait"), _listings(tg.syncs, "release"))


def _fold(tg: TaskGraph, rep: list[int], tdev: np.ndarray, wait, release) -> TaskGraph:
    """`fold_with`, given the task devices and the listings (`_listings`) of the sync units."""
    kept = (np.asarray(rep, dtype=np.int64) == np.arange(tg.n_devices, dtype=np.int64))[tdev]
    new_id = np.cumsum(kept) - 1  # a kept task's id in the folded graph
    ids = np.flatnonzero(kept)
    old = ids.tolist()
    t = tg.tasks
    tasks = ComputeTasks([t.device[k] for k in old], [t.kind[k] for k in old], [t.group[k] for k in old],
                         [t.duration_ms[k] for k in old])
    renumber = new_id.tolist()
    programs = [[renumber[k] for k in p] if rep[d] == d else [] for d, p in enumerate(tg.programs)]
    syncs = [replace(u, wait=w, release=r) for u, w, r in zip(tg.syncs, _kept_lists(wait, len(tg.syncs), kept, new_id),
                                                               _kept_lists(release, len(tg.syncs), kept, new_id))]
    transfers = [replace(x, producer=renumber[x.producer] if x.producer >= 0 else x.producer,
                         consumer=renumber[x.consumer] if x.consumer >= 0 else x.consumer,
                         wait=tuple(renumber[k] for k in x.wait), deliver=tuple(renumber[k] for k in x.deliver))
                 for x in tg.transfers]
    return replace(tg, tasks=tasks, programs=programs, transfers=transfers, syncs=syncs,
                   inputs=[tg.inputs[k] for k in old], first_sync=[tg.first_sync[k] for k in old],
                   dependents=[tg.dependents[k] for k in old])


def strategy_twins(ctx, strategy, plan: list, min_devices: int = MIN_DEVICES) -> list[int] | None:
    """rep[d] read off the strategy, before any task is built (`tag.sim.build.build_task_graph`'s ``rep``): devices
    of one type with the same rows in every group form a class, represented by its last device, except that a device
    at an end of a message of `plan` (the strategy's `tag.sim.tensor_sends.transfer_plan`) is alone, and so is one
    with no rows (no tasks, as in `twin_representatives`).
    None when the cluster has fewer than `min_devices` devices, the strategy is pipelined or has a sharded group
    (whose collectives and tails the builder makes per replica), or no device has a twin.

    They are twins by the definition above: the builder makes a device's tasks from its type and rows alone, in one
    order (forwards by group, backwards reversed, its step, its ZeRO waits), and every sync unit over its groups'
    devices (gradient syncs, buckets, shared parameters, SFB, ZeRO gathers, batch statistics) lists the task at the
    same program position of each of them; a device at an end of a message is alone, so no transfer touches a class
    of two or more. `tests/sim/test_sim_fold.py` checks every such class against
    `twin_representatives` of the whole graph."""
    decs = strategy.decisions
    n = len(ctx.dtypes)
    if n < min_devices or strategy.pipeline is not None or any(d.shard is not None for d in decs):
        return None
    alone = {d for x in plan for d in (x.src, x.dst)}
    tid = ctx.cluster.type_ids
    last: dict = {}
    keys = []
    for d, rows in enumerate(zip(*(dec.rows for dec in decs))):
        key = d if d in alone or not any(rows) else (tid[d], rows)
        keys.append(key)
        last[key] = d
    if len(last) == n:
        return None
    return [last[k] for k in keys]


def _kept_lists(listings, n_units: int, kept: np.ndarray, new_id: np.ndarray) -> list[list[int]]:
    """Every unit's list of `listings` (`_listings`) with the folded tasks' listings dropped, renumbered."""
    tasks, syncs = listings
    keep = kept[tasks]
    tasks, syncs = new_id[tasks[keep]], syncs[keep]
    bounds = np.searchsorted(syncs, np.arange(n_units + 1)).tolist()
    flat = tasks.tolist()
    return [flat[bounds[j]:bounds[j + 1]] for j in range(n_units)]


def unfold_end_ms(device_end_ms: list[float], rep: list[int]) -> list[float]:
    """Every device's stream end from a folded run's: a twin ends when its representative does."""
    return [device_end_ms[r] for r in rep]
