"""Task graphs for the simulator's exact reductions (`tag.sim.fuse`, `tag.sim.fold`): hand-built ones, the shipped
models on the shipped clusters, and random strategies with transfers, several communicators and every sync method."""

from __future__ import annotations

import dataclasses
import os
import random

from tag.sim.taskgraph import (ComputeTasks, DependentKind, MemoryInputs, SyncUnit, TaskGraph, Transfer)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYNC, XFER = DependentKind.SYNC, DependentKind.TRANSFER


def hand_graph(tasks, n_devices, syncs=(), transfers=()) -> TaskGraph:
    """tasks: (device, kind, ms) in program order per device; syncs: (wait, release, phases) with the first
    listing of each task in first_sync; transfers: (spec, producer, consumer)."""
    ct = ComputeTasks()
    for i, (d, kind, ms) in enumerate(tasks):
        ct.add([d], kind, i, [ms])
    programs = [[k for k in range(len(ct)) if ct.device[k] == d] for d in range(n_devices)]
    inputs, first, deps = [0] * len(ct), [-1] * len(ct), [None] * len(ct)
    units = []
    for j, (wait, release, phases) in enumerate(syncs):
        for k in wait:
            if first[k] < 0:
                first[k] = j
            else:
                deps[k] = (deps[k] or []) + [(SYNC, j)]
        for k in release:
            inputs[k] += 1
        units.append(SyncUnit((j,), tuple(range(n_devices)), 1.0, "ring", None, f"s{j}", list(wait), list(release),
                              phases))
    xs = []
    for i, (spec, p, c) in enumerate(transfers):
        xs.append(Transfer(spec, p, c, (p,), (c,), f"x{i}"))
        deps[p] = (deps[p] or []) + [(XFER, i)]
        inputs[c] += 1
    return TaskGraph(n_devices, ct, programs, xs, units, inputs, first, deps, MemoryInputs([], [0.0] * n_devices))


def shipped_inputs(model: str, topology: str):
    from tag.cost import make_cost_model
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.strategy import TrainingConfig
    from tag.topology import load_topology

    cluster = load_topology(os.path.join(ROOT, "datasets", "topologies", f"{topology}.json"))
    graph = load_model(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"), n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    training = TrainingConfig(optimizer="momentum")
    return gg, cluster, make_cost_model(gg, training), training, graph.batch_size


def random_strategy(gg, n_dev: int, batch: int, rng: random.Random):
    """Three random row maps (each over a random subset of devices) spread over the groups, random sync methods
    and ps servers: transfers, several communicators and syncs of every method."""
    from tag.strategy import SYNC_METHODS, Decision, Strategy

    maps = []
    for _ in range(3):
        devs = sorted(rng.sample(range(n_dev), rng.randint(1, n_dev)))
        rows = [0] * n_dev
        for _ in range(batch):
            rows[rng.choice(devs)] += 1
        maps.append(tuple(rows))
    decs = []
    for _ in range(gg.n_groups):
        rows = rng.choice(maps)
        sync = rng.choice(SYNC_METHODS)
        server = rng.choice([d for d in range(n_dev) if rows[d] > 0]) if sync == "ps" else None
        decs.append(Decision(rows, sync, server))
    return Strategy(tuple(decs))


def with_buckets(st, mb: float):
    """The strategy with gradient buckets of `mb` MiB where the Strategy has them (strategy version 2)."""
    if "bucket_mb" in {f.name for f in dataclasses.fields(st)}:
        return dataclasses.replace(st, bucket_mb=mb)
    return st
