"""Chrome-trace export (loads in Perfetto and chrome://tracing).

Process 0 ("compute") has one thread (lane) per device, tid = device index; process 1 ("network") has
one lane per link direction, tid = link index. A pipelined iteration adds process 2 ("idle"): one lane per
device, tid = device index, with an "idle" event for every gap in the device's compute stream before its last
task ends (the pipeline's bubbles; `idle_events`). Compute events of a pipelined iteration name their micro-batch
("fwd g3 mb2 ..."; `compute_event_name`). Tasks of no group are "update" (the optimizer step) and "wait gathers"
(a stream waiting for ZeRO's all-gathers of updated weights, `tag.sim.zero`). Flows carry their sync's label:
"sync g3", "bucket g5..g3", "reduce-scatter g3" (ZeRO), "gather w g3 fwd" / "gather w g3 bwd" (ZeRO 3's weight
gathers before a pass), "gather w g5..g3 updated" (ZeRO 1-2 after the step). A backward that re-runs its forward
(recompute) has ``"recompute": true`` in its args. Events are complete events ("ph": "X") with ts and dur
in microseconds; thread_name / process_name metadata events ("ph": "M") name the lanes.
"""

from __future__ import annotations

import json

from tag.fileio import atomic_write

COMPUTE_PID = 0
NETWORK_PID = 1
IDLE_PID = 2


def x_event(name: str, cat: str, start_ms: float, dur_ms: float, pid: int, tid: int, args: dict | None = None) -> dict:
    """One complete ("X") event; times given in ms are written in us."""
    ev = {"name": name, "cat": cat, "ph": "X", "ts": start_ms * 1e3, "dur": dur_ms * 1e3, "pid": pid, "tid": tid}
    if args:
        ev["args"] = args
    return ev


def lane_metadata(device_names: dict[int, str], link_names: dict[int, str]) -> list[dict]:
    """process_name and thread_name metadata for the device and link lanes that appear."""
    out = [{"name": "process_name", "ph": "M", "pid": COMPUTE_PID, "tid": 0, "args": {"name": "compute"}},
           {"name": "process_name", "ph": "M", "pid": NETWORK_PID, "tid": 0, "args": {"name": "network"}}]
    out += [{"name": "thread_name", "ph": "M", "pid": COMPUTE_PID, "tid": i, "args": {"name": n}}
            for i, n in sorted(device_names.items())]
    out += [{"name": "thread_name", "ph": "M", "pid": NETWORK_PID, "tid": i, "args": {"name": n}}
            for i, n in sorted(link_names.items())]
    return out


def write_chrome_trace(result, path: str) -> None:
    """Write a SimResult's trace events as Chrome-trace JSON ({"traceEvents": [...]})."""
    atomic_write(path, lambda f: json.dump({"traceEvents": result.trace_events, "displayTimeUnit": "ms"}, f))


STEP_EVENT_NAMES = {"update": "update", "wait": "wait gathers"}  # tasks of no group: TaskKind value -> event name


def compute_event_name(kind: str, group: int, ops: str, micro_batch: int | None = None) -> str:
    """The name of a compute task's event: "fwd g3 op_a .. op_b", or with a micro-batch "fwd g3 mb2 op_a .. op_b".

    >>> compute_event_name("bwd", 3, "", 2)
    'bwd g3 mb2'
    """
    mb = "" if micro_batch is None or micro_batch < 0 else f" mb{micro_batch}"
    return f"{kind} g{group}{mb} {ops}".strip()


def idle_events(programs: list[list[int]], start_ms: list[float], duration_ms: list[float],
                device_names: dict[int, str]) -> list[dict]:
    """The "idle" process: per device, an "idle" event for each gap between time 0 or the end of one task of its
    program and the start of the next (gaps under 1e-9 ms left out), and its lane metadata.

    >>> [(e["ts"], e["dur"]) for e in idle_events([[0, 1]], [1.0, 4.0], [2.0, 1.0], {0: "d"}) if e["ph"] == "X"]
    [(0.0, 1000.0), (3000.0, 1000.0)]
    """
    out = [{"name": "process_name", "ph": "M", "pid": IDLE_PID, "tid": 0, "args": {"name": "idle"}}]
    out += [{"name": "thread_name", "ph": "M", "pid": IDLE_PID, "tid": d, "args": {"name": n}}
            for d, n in sorted(device_names.items())]
    for d, prog in enumerate(programs):
        free = 0.0
        for k in prog:
            if start_ms[k] - free > 1e-9:
                out.append(x_event("idle", "idle", free, start_ms[k] - free, IDLE_PID, d))
            free = start_ms[k] + duration_ms[k]
    return out
