"""`algorithm_ms` (a sync's time alone, computed phase by phase) against the event loop running that one sync.

The task graph: one zero-time task per device that the sync waits for, one zero-time task per device it releases;
the iteration then ends when the sync has delivered (`tag.sim.events.run_task_graph`)."""

from __future__ import annotations

import pytest

from simkit_builders import make_cluster
from tag.sim.algorithms import algorithm_ms
from tag.sim.collectives import sync_phases
from tag.sim.events import run_task_graph
from tag.sim.taskgraph import ComputeTasks, DependentKind, MemoryInputs, SyncUnit, TaskGraph, TaskKind


def _one_sync_ms(cluster, method, devices, nbytes, server=None, ring_gbps=None) -> float:
    n = cluster.n_devices
    ct = ComputeTasks()
    before = list(ct.add(list(devices), TaskKind.BACKWARD, 0, [0.0] * len(devices)))
    after = list(ct.add(list(devices), TaskKind.UPDATE, -1, [0.0] * len(devices)))
    programs = [[k for k in range(len(ct)) if ct.device[k] == d] for d in range(n)]
    phases = sync_phases(method, cluster, tuple(devices), nbytes, server, ring_gbps)
    unit = SyncUnit((0,), tuple(devices), nbytes, method, server, "s", wait=before, release=after, phases=phases)
    inputs = [0] * len(ct)
    deps: list = [None] * len(ct)
    for k in before:
        deps[k] = [(DependentKind.SYNC, 0)]
    for k in after:
        inputs[k] += 1
    tg = TaskGraph(n, ct, programs, [], [unit], inputs, [-1] * len(ct), deps, MemoryInputs([], [0.0] * n))
    caps = [l.bytes_per_ms for l in cluster.links]
    return max(run_task_graph(tg, caps).device_end_ms)


CLUSTERS = {
    "8x8": make_cluster([8] * 8, intra_gbps=1000.0, nic_gbps=100.0),
    "uneven": make_cluster([3, 5, 1, 2], intra_gbps=200.0, nic_gbps=25.0),
    "2x4": make_cluster([4, 4]),
}


@pytest.mark.parametrize("name", sorted(CLUSTERS))
@pytest.mark.parametrize("method", ["ring", "tree", "hierarchical", "leader", "ps", "allgather"])
@pytest.mark.parametrize("nbytes", [4096.0, 3e7])
def test_algorithm_ms_is_the_event_loop_time_of_the_sync_alone(name, method, nbytes):
    cl = CLUSTERS[name]
    devices = tuple(range(cl.n_devices))
    server = devices[-1] if method == "ps" else None  # the server's links are shared: progressive filling
    want = _one_sync_ms(cl, method, devices, nbytes, server)
    assert algorithm_ms(method, cl, devices, nbytes, server) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("method", ["ring", "tree", "hierarchical"])
def test_with_a_measured_collective_rate_and_a_subset_of_devices(method):
    cl = CLUSTERS["uneven"]
    devices = (0, 2, 3, 4, 8, 9, 10)
    want = _one_sync_ms(cl, method, devices, 5e6, None, 10.0)
    assert algorithm_ms(method, cl, devices, 5e6, None, 10.0) == pytest.approx(want, rel=1e-9)
