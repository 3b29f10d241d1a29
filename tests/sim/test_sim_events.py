"""The event loop on hand-built task graphs, finish times worked out by hand (no groups, no strategy)."""

from __future__ import annotations

import pytest

from tag.sim.collectives import FlowSpec
from tag.sim.critical_path import critical_path
from tag.sim.events import EventKind, run_task_graph
from tag.sim.taskgraph import (ComputeTasks, DependentKind, MemoryInputs, SyncUnit, TaskGraph, TaskKind,
                               Transfer)

CAP = 1e5  # bytes per ms of every link


def _graph(tasks: list[tuple[int, TaskKind, float]], n_devices: int, transfers=(), syncs=()) -> TaskGraph:
    """tasks: (device, kind, ms) in program order per device; transfers: (spec, producer, consumer);
    syncs: SyncUnit with wait and release filled in."""
    ct = ComputeTasks()
    for i, (d, kind, ms) in enumerate(tasks):
        ct.add([d], kind, -1 if kind is TaskKind.UPDATE else i, [ms])  # one group per task
    programs = [[k for k in range(len(ct)) if ct.device[k] == d] for d in range(n_devices)]
    inputs = [0] * len(ct)
    deps: list = [None] * len(ct)

    def depend(k, ref):
        deps[k] = (deps[k] or []) + [ref]

    xs = []
    for i, (spec, p, c) in enumerate(transfers):
        xs.append(Transfer(spec, p, c, (p,), (c,), f"x{i}"))
        depend(p, (DependentKind.TRANSFER, i))
        inputs[c] += 1
    for j, u in enumerate(syncs):
        for k in u.wait:
            depend(k, (DependentKind.SYNC, j))
        for k in u.release:
            inputs[k] += 1
    return TaskGraph(n_devices, ct, programs, list(xs), list(syncs), inputs, [-1] * len(ct), deps,
                     MemoryInputs([], [0.0] * n_devices))


def _p2p(link: int, nbytes: float, latency_ms: float = 0.0) -> FlowSpec:
    return FlowSpec((link,), (1.0,), nbytes, latency_ms, 0, 1)


def test_one_transfer_between_two_devices():
    # task 0 on device 0 (2 ms) sends 1e6 B over link 0 (1e5 B/ms: 10 ms, then 0.01 ms latency) to task 1 on
    # device 1 (3 ms): starts at 2 + 10 + 0.01 = 12.01, ends 15.01
    tg = _graph([(0, TaskKind.FORWARD, 2.0), (1, TaskKind.FORWARD, 3.0)], 2, [(_p2p(0, 1e6, 0.01), 0, 1)])
    tl = run_task_graph(tg, [CAP], log_flows=True)
    assert tl.start_ms == pytest.approx([0.0, 12.01])
    assert tl.device_end_ms == pytest.approx([2.0, 15.01])
    assert tl.link_bytes == [1e6]
    assert tl.flows == [("x0", 2.0, pytest.approx(12.0), (0,))]
    # alone on its link, the one-pass critical path is exact
    assert critical_path(tg, [CAP]).iteration_ms == pytest.approx(15.01)


def test_two_flows_on_one_link_share_it():
    # device 0 runs two 1 ms tasks; each sends 1e6 B over link 0 to its own consumer on device 1 (1 ms each).
    # Flow A runs alone from 1 to 2 (1e5 B), then shares with B at 5e4 B/ms: A's remaining 9e5 B drain by
    # 2 + 18 = 20, when B has moved 9e5 B; alone again, B's last 1e5 B take 1 ms: 21. Consumers: 20-21, 21-22.
    tasks = [(0, TaskKind.FORWARD, 1.0), (0, TaskKind.FORWARD, 1.0), (1, TaskKind.FORWARD, 1.0),
             (1, TaskKind.FORWARD, 1.0)]
    tg = _graph(tasks, 2, [(_p2p(0, 1e6), 0, 2), (_p2p(0, 1e6), 1, 3)])
    tl = run_task_graph(tg, [CAP])
    assert tl.start_ms == pytest.approx([0.0, 1.0, 20.0, 21.0])
    assert tl.device_end_ms == pytest.approx([2.0, 22.0])


def test_a_sync_copies_runs_its_phase_and_releases_the_steps():
    # backwards of 1 and 2 ms on devices 0 and 1; the sync is ready at 2, copies in 0.5 ms, runs one 1e5 B flow
    # (1 ms) and copies out 0.25 ms: it releases both 1 ms steps at 3.75, which end at 4.75
    tasks = [(0, TaskKind.BACKWARD, 1.0), (1, TaskKind.BACKWARD, 2.0), (0, TaskKind.UPDATE, 1.0),
             (1, TaskKind.UPDATE, 1.0)]
    u = SyncUnit((0,), (0, 1), 1e5, "allreduce", None, "s", wait=[0, 1], release=[2, 3],
                 phases=[[_p2p(0, 1e5)]], copy_in_ms=0.5, copy_out_ms=0.25)
    tl = run_task_graph(_graph(tasks, 2, syncs=[u]), [CAP])
    assert tl.start_ms == pytest.approx([0.0, 0.0, 3.75, 3.75])
    assert tl.device_end_ms == pytest.approx([4.75, 4.75])


def test_syncs_on_one_communicator_run_one_at_a_time():
    # two syncs over the same devices become ready together at 1; each is a 1 ms flow on its own link, so apart
    # they would overlap, but they share a communicator: the second runs 2 to 3 and releases device 1's step then
    tasks = [(0, TaskKind.BACKWARD, 1.0), (1, TaskKind.BACKWARD, 1.0), (0, TaskKind.UPDATE, 1.0),
             (1, TaskKind.UPDATE, 1.0)]
    s0 = SyncUnit((0,), (0, 1), 1e5, "allreduce", None, "a", wait=[0, 1], release=[2], phases=[[_p2p(0, 1e5)]])
    s1 = SyncUnit((0,), (0, 1), 1e5, "allreduce", None, "b", wait=[0, 1], release=[3], phases=[[_p2p(1, 1e5)]])
    tl = run_task_graph(_graph(tasks, 2, syncs=[s0, s1]), [CAP, CAP])
    assert tl.start_ms == pytest.approx([0.0, 0.0, 2.0, 3.0])


def test_a_task_whose_input_never_comes_is_a_deadlock():
    tg = _graph([(0, TaskKind.FORWARD, 1.0)], 1)
    tg.inputs[0] = 1
    with pytest.raises(RuntimeError, match="deadlock"):
        run_task_graph(tg, [])


def test_event_kinds_are_named():
    assert {k.name for k in EventKind} == {"FLOW_START", "TRANSFER_ARRIVED", "PHASE_FLOW_ARRIVED", "SYNC_READY",
                                           "SYNC_STEP"}
