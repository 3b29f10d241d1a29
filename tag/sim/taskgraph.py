"""The task graph of one training iteration: what the builder (`tag.sim.build`) produces and the event loop
(`tag.sim.events`) and the critical-path estimate (`tag.sim.critical_path`) read.

Plain data, no behaviour. Task ids are indices 0..n_tasks-1 into the parallel lists of `ComputeTasks`; devices are
topology-order indices; times are ms, sizes bytes.

* **Compute tasks** run on one device's compute stream, in that device's **program** order
  (`TaskGraph.programs[d]`); a task starts when the stream is free and every transfer or sync it waits for has
  delivered (its count of such inputs is ``TaskGraph.inputs[k]``).
* A **transfer** is one flow (`FlowSpec`) that starts once every task in ``wait`` has ended, and on delivery
  releases every task in ``deliver``. ``producer`` / ``consumer`` name the tasks whose data it carries (for an
  asynchronous transfer ``wait == (producer,)`` and ``deliver == (consumer,)``; a blocking exchange waits for
  and blocks both ranks, `tag.sim.rendezvous`).
* A **sync unit** is one gradient sync: it becomes ready when every task in ``wait`` has ended (a task may be
  listed more than once: each listing is one input), queues on its communicator (``devices``: syncs over the same
  device set run one at a time), waits ``copy_in_ms``, runs its ``phases`` (each a list of concurrent flows;
  a phase starts when the previous one has delivered), waits ``copy_out_ms``, then releases every task in
  ``release`` (the optimizer steps) and frees its communicator.
* What task k's end counts towards: first the sync unit ``first_sync[k]`` (-1: none; kept apart because nearly
  every backward task completes exactly one sync), then ``dependents[k]`` in order, ``(DependentKind, index)`` of
  transfers and further sync units. The order is the order in which simultaneous consequences are queued (ties
  at equal times are processed first-queued first), so it is part of the graph's meaning.
* `MemoryInputs` is what the memory pass (`tag.sim.memory.peak_memory_bytes`) reads besides the strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tag.sim.collectives import FlowSpec


class TaskKind(Enum):
    """What a compute task computes (the value is the trace category)."""

    FORWARD = "fwd"
    BACKWARD = "bwd"
    UPDATE = "update"
    WAIT = "wait"  # zero length: the stream waits for collectives that end the iteration (`tag.sim.zero`)


class DependentKind(Enum):
    """What a finished task counts towards."""

    TRANSFER = "transfer"
    SYNC = "sync"


@dataclass
class ComputeTasks:
    """Compute tasks as parallel lists indexed by task id: device index, kind, op group (-1: the optimizer step,
    which spans groups, and a wait task) and duration (ms)."""

    device: list[int] = field(default_factory=list)
    kind: list[TaskKind] = field(default_factory=list)
    group: list[int] = field(default_factory=list)
    duration_ms: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.duration_ms)

    def add(self, devices: list[int], kind: TaskKind, group: int, durations_ms: list[float]) -> range:
        """Append one task per device (same kind and group); their ids."""
        first = len(self.duration_ms)
        self.device += devices
        self.kind += [kind] * len(devices)
        self.group += [group] * len(devices)
        self.duration_ms += durations_ms
        return range(first, len(self.duration_ms))


@dataclass(slots=True)
class Transfer:
    """One flow between compute tasks (module docstring)."""

    spec: FlowSpec
    producer: int
    consumer: int
    wait: tuple[int, ...]
    deliver: tuple[int, ...]
    label: str


@dataclass(slots=True)
class SyncUnit:
    """One gradient sync of `nbytes` over `devices` by `method` (server: the ps server, or None) after the backward
    of `groups` (module docstring for wait, phases, copies and release)."""

    groups: tuple[int, ...]
    devices: tuple[int, ...]
    nbytes: float
    method: str
    server: int | None
    label: str
    wait: list[int] = field(default_factory=list)
    release: list[int] = field(default_factory=list)
    phases: list = field(default_factory=list)  # list[list[FlowSpec]]
    copy_in_ms: float = 0.0
    copy_out_ms: float = 0.0


@dataclass
class MemoryInputs:
    """What the memory pass needs besides the strategy: every transfer pair once as (consumer group, consumer
    device, producer group, producer device, bytes) (activations received in forward, gradients in backward),
    and per-device persistent bytes of shared parameters held where their owner group is absent."""

    recv: list[tuple[int, int, int, int, float]]
    extra_static_bytes: list[float]


@dataclass
class TaskGraph:
    """One training iteration as tasks, transfers and sync units (module docstring)."""

    n_devices: int
    tasks: ComputeTasks
    programs: list[list[int]]
    transfers: list[Transfer]
    syncs: list[SyncUnit]
    inputs: list[int]  # per task: transfers and syncs it waits for (with multiplicity)
    first_sync: list[int]  # per task: the sync unit its end counts towards first (-1: none)
    dependents: list[list[tuple[DependentKind, int]] | None]  # per task, after first_sync (None: nothing)
    memory: MemoryInputs
    batch_size: int = 0
