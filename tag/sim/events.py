"""The event loop: runs a `TaskGraph` (`tag.sim.taskgraph`) on a cluster's directed links.

It knows tasks, transfers and sync units, never groups, strategies or SFB. Compute: each device runs its program
in order; a task starts at max(stream free, last input delivered). Network: every flow shares its directed
links max-min fairly with the flows in flight (`tag.sim.network.Network`, rates recomputed once per instant);
its latency is added after its bytes drain. Events are kept in a heap by (time, sequence): at one instant they
are handled first-queued first, all before the rates are recomputed. Times in ms.

Event kinds (`EventKind`), each a small dataclass:

* `FlowStart`: a transfer's flow enters the network (all the tasks it waits for have ended);
* `TransferArrived`: a transfer's flow has drained and its latency passed: its deliver tasks may start;
* `PhaseFlowArrived`: one flow of a sync's current phase has arrived (the phase ends with its last flow);
* `SyncReady`: every task a sync waits for has ended (at time 0 for a sync that waits for none): it queues on
  its communicator (its device set);
* `SyncStep`: a sync's copy-in or copy-out has ended: it continues with its next phase or releases.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from tag.sim.collectives import FlowSpec
from tag.sim.network import INF, Flow, Network
from tag.sim.taskgraph import DependentKind, TaskGraph

_SYNC = DependentKind.SYNC


class EventKind(Enum):
    FLOW_START = "flow start"
    TRANSFER_ARRIVED = "transfer arrived"
    PHASE_FLOW_ARRIVED = "phase flow arrived"
    SYNC_READY = "sync ready"
    SYNC_STEP = "sync step"


@dataclass(slots=True)
class FlowStart:
    kind: ClassVar[EventKind] = EventKind.FLOW_START
    transfer: int


@dataclass(slots=True)
class TransferArrived:
    kind: ClassVar[EventKind] = EventKind.TRANSFER_ARRIVED
    transfer: int


@dataclass(slots=True)
class PhaseFlowArrived:
    kind: ClassVar[EventKind] = EventKind.PHASE_FLOW_ARRIVED
    sync: int


@dataclass(slots=True)
class SyncReady:
    kind: ClassVar[EventKind] = EventKind.SYNC_READY
    sync: int


@dataclass(slots=True)
class SyncStep:
    kind: ClassVar[EventKind] = EventKind.SYNC_STEP
    sync: int


@dataclass
class Timeline:
    """What one run produced: each task's start (ms), each device's stream end (ms), bytes per directed link
    (cluster link index), and with `log_flows` every flow as (label, start ms, drain ms, links)."""

    start_ms: list[float]
    device_end_ms: list[float]
    link_bytes: list[float]
    flows: list[tuple[str, float, float, tuple[int, ...]]]


class _Run:
    """One execution of a task graph (see the module docstring)."""

    def __init__(self, tg: TaskGraph, link_caps_bytes_per_ms: list[float], log_flows: bool, member_ms=None):
        self.tg = tg
        self.dur = tg.tasks.duration_ms
        self.member_ms = member_ms or {}
        self.tdev = tg.tasks.device
        self.pend = list(tg.inputs)
        self.ready = [0.0] * len(self.dur)
        self.start = [0.0] * len(self.dur)
        self.ptr = [0] * tg.n_devices
        self.free = [0.0] * tg.n_devices
        # run-time state of each sync unit, as parallel lists: tasks still to end, ready time, current phase,
        # flows of that phase still in flight, whether it has copied out
        n_syncs = len(tg.syncs)
        self.s_waiting = [len(u.wait) for u in tg.syncs]
        self.s_ready = [0.0] * n_syncs
        self.s_phase = [0] * n_syncs
        self.s_outstanding = [0] * n_syncs
        self.s_copied = [False] * n_syncs
        self.xfer_wait = [len(x.wait) for x in tg.transfers]
        self.xfer_ready = [0.0] * len(tg.transfers)
        self.net = Network(link_caps_bytes_per_ms)
        self.link_bytes = [0.0] * len(link_caps_bytes_per_ms)
        self.log_flows = log_flows
        self.flows: list = []
        self.heap: list = []
        self.seq = 0
        self.comm_busy: dict[tuple, bool] = {}
        self.comm_queue: dict[tuple, deque] = {}

    def push(self, t: float, event) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, event))

    # ---- compute -----------------------------------------------------------------------------------
    def advance(self, d: int) -> None:
        """Run device d's program from its current position while the next task has all its inputs."""
        prog, i, t = self.tg.programs[d], self.ptr[d], self.free[d]
        pend, ready, start, dur, members = self.pend, self.ready, self.start, self.dur, self.member_ms
        first, deps, waiting, sready = self.tg.first_sync, self.tg.dependents, self.s_waiting, self.s_ready
        n = len(prog)
        while i < n:
            k = prog[i]
            if pend[k]:
                break
            if ready[k] > t:
                t = ready[k]
            start[k] = t
            m = members.get(k)
            if m is None:
                t += dur[k]
            else:  # a fused chain: its members' durations one by one, as the unfused stream adds them
                for ms in m:
                    t += ms
            j = first[k]
            if j >= 0:
                waiting[j] -= 1
                if t > sready[j]:
                    sready[j] = t
                if waiting[j] == 0:
                    self.push(sready[j], SyncReady(j))
            if deps[k] is not None:  # what this task's end counts towards next, in order
                for what, j in deps[k]:
                    if what is _SYNC:
                        waiting[j] -= 1
                        if t > sready[j]:
                            sready[j] = t
                        if waiting[j] == 0:
                            self.push(sready[j], SyncReady(j))
                    else:
                        self.xfer_wait[j] -= 1
                        if t > self.xfer_ready[j]:
                            self.xfer_ready[j] = t
                        if self.xfer_wait[j] == 0:
                            self.push(self.xfer_ready[j], FlowStart(j))
            i += 1
        self.ptr[d], self.free[d] = i, t

    def arrive(self, tasks, t: float) -> None:
        """One input of each task of `tasks` arrived at t (in order: a task whose last input this is runs its
        device's program on at once)."""
        pend, ready, tdev = self.pend, self.ready, self.tdev
        for k in tasks:
            pend[k] -= 1
            if t > ready[k]:
                ready[k] = t
            if pend[k] == 0:
                self.advance(tdev[k])

    # ---- network -----------------------------------------------------------------------------------
    def start_flow(self, spec: FlowSpec, arrival, label: str, t: float) -> None:
        """Put `spec` on the network at t; `arrival` is the event queued when it has arrived."""
        lb = self.link_bytes
        for l, w in zip(spec.links, spec.weights):
            lb[l] += w * spec.volume_bytes
        if not spec.links or spec.volume_bytes <= 0:
            self.push(t + spec.latency_ms, arrival)
            return
        self.net.add(Flow(spec.links, spec.weights, spec.volume_bytes, spec.latency_ms, arrival, label), t)

    # ---- syncs -------------------------------------------------------------------------------------
    def begin_sync(self, j: int, t: float) -> None:
        u = self.tg.syncs[j]
        self.s_phase[j] = 0
        if u.copy_in_ms > 0:  # the ranks' memory work on the bucket before the collective
            self.push(t + u.copy_in_ms, SyncStep(j))
        else:
            self.next_phase(j, t)

    def next_phase(self, j: int, t: float) -> None:
        """Start sync j's current phase (skipping empty ones) or, after the last, copy out and release."""
        u = self.tg.syncs[j]
        phases = u.phases
        phase = self.s_phase[j]
        while phase < len(phases) and not phases[phase]:
            phase += 1
        self.s_phase[j] = phase
        if phase >= len(phases):
            if u.copy_out_ms > 0 and not self.s_copied[j]:  # the ranks copy the summed bucket back into .grad
                self.s_copied[j] = True
                self.push(t + u.copy_out_ms, SyncStep(j))
                return
            self.arrive(u.release, t)
            q = self.comm_queue[u.devices]
            if q:
                self.begin_sync(q.popleft(), t)
            else:
                self.comm_busy[u.devices] = False
            return
        specs = phases[phase]
        self.s_outstanding[j] = len(specs)
        for sp in specs:
            self.start_flow(sp, PhaseFlowArrived(j), u.label, t)

    # ---- event handlers ----------------------------------------------------------------------------
    def _on_flow_start(self, ev: FlowStart, t: float) -> None:
        x = self.tg.transfers[ev.transfer]
        self.start_flow(x.spec, TransferArrived(ev.transfer), x.label, t)

    def _on_transfer(self, ev: TransferArrived, t: float) -> None:
        self.arrive(self.tg.transfers[ev.transfer].deliver, t)

    def _on_phase_flow(self, ev: PhaseFlowArrived, t: float) -> None:
        j = ev.sync
        self.s_outstanding[j] -= 1
        if self.s_outstanding[j] == 0:
            self.s_phase[j] += 1
            self.next_phase(j, t)

    def _on_sync_ready(self, ev: SyncReady, t: float) -> None:
        key = self.tg.syncs[ev.sync].devices
        q = self.comm_queue.setdefault(key, deque())
        if self.comm_busy.get(key):
            q.append(ev.sync)
        else:
            self.comm_busy[key] = True
            self.begin_sync(ev.sync, t)

    def _on_sync_step(self, ev: SyncStep, t: float) -> None:
        self.next_phase(ev.sync, t)

    # ---- the loop ----------------------------------------------------------------------------------
    def run(self) -> Timeline:
        for i, w in enumerate(self.xfer_wait):
            if w == 0:  # waits for no task (a blocking exchange before both ranks' first task)
                self.push(0.0, FlowStart(i))
        for j, w in enumerate(self.s_waiting):
            if w == 0:  # waits for no task (a weight gather before its ranks' second task)
                self.push(0.0, SyncReady(j))
        for d in range(self.tg.n_devices):
            self.advance(d)
        heap, net, handlers = self.heap, self.net, _HANDLERS
        while True:
            tn = net.next_drain_ms()
            if heap and heap[0][0] <= tn:
                t = heap[0][0]
                while heap and heap[0][0] == t:  # every event at this instant before rates are recomputed
                    ev = heapq.heappop(heap)[2]
                    handlers[type(ev)](self, ev, t)
            elif tn < INF:
                for f in net.pop_drained(tn):
                    if self.log_flows:
                        self.flows.append((f.label, f.start_ms, tn, f.links))
                    self.push(tn + f.latency_ms, f.payload)
            else:
                break
        if any(self.ptr[d] != len(p) for d, p in enumerate(self.tg.programs)):
            raise RuntimeError("simulation deadlock: a task waits for an input that never arrives")
        return Timeline(self.start, self.free, self.link_bytes, self.flows)


_HANDLERS = {FlowStart: _Run._on_flow_start, TransferArrived: _Run._on_transfer,
             PhaseFlowArrived: _Run._on_phase_flow, SyncReady: _Run._on_sync_ready, SyncStep: _Run._on_sync_step}
# keyed by event class: a class hashes in C, an Enum member in Python (each event's `kind` names the class)


def run_task_graph(tg: TaskGraph, link_caps_bytes_per_ms: list[float], log_flows: bool = False,
                   member_ms: dict | None = None) -> Timeline:
    """Run `tg` on links of these capacities (bytes per ms, indexed as the FlowSpecs' links); see the module.

    member_ms (from `tag.sim.fuse.fuse_chains`): fused chain's task id -> the durations of the tasks folded into
    it, which its stream adds one by one instead of its total duration, so that the fused run's times are
    bit-identical to the unfused run's."""
    return _Run(tg, link_caps_bytes_per_ms, log_flows, member_ms).run()
