"""Chrome-trace export (loads in Perfetto and chrome://tracing).

Process 0 ("compute") has one thread (lane) per device, tid = device index; process 1 ("network") has
one lane per link direction, tid = link index. Events are complete events ("ph": "X") with ts and dur
in microseconds; thread_name / process_name metadata events ("ph": "M") name the lanes.
"""

from __future__ import annotations

import json

from tag.fileio import atomic_write

COMPUTE_PID = 0
NETWORK_PID = 1


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
