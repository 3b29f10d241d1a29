"""The simulated iteration per device (inline SVG), read from the plan's Chrome-trace events.

Each device class (identical devices, `tag.report.classes`) gets one block drawn from its first member: a compute
lane (forward, backward, optimizer update; idle time is the grey background), a sync lane (gradient all-reduce,
ps, SFB all-gathers) and a transfer lane (activations and their gradients between groups). Communication lanes
show when any flow crosses one of the device's own links (device <-> machine), overlapping flows merged. Hover
gives each task's group, rows, start and duration. Idle ms = iteration ms - busy ms (compute-stream time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tag.report.classes import id_span
from tag.report.svg import IDLE_COLOUR, KIND_COLOURS, attrs, esc, nice_ticks, num, rect, text

MAX_CLASSES_DRAWN = 48
LABEL_PX = 250
PLOT_PX = 1080
BLOCK_PX = 44
COMPUTE_PID, NETWORK_PID = 0, 1


@dataclass
class Lanes:
    """One device's timeline: compute = [(kind, start ms, duration ms, name, rows)]; sync / transfer = merged
    [(start ms, end ms, flow count, first labels)]."""

    compute: list = field(default_factory=list)
    sync: list = field(default_factory=list)
    transfer: list = field(default_factory=list)


def _merge(intervals: list[tuple[float, float, str]]) -> list[tuple[float, float, int, list[str]]]:
    out: list[list] = []
    for s, e, label in sorted(intervals):
        if out and s <= out[-1][1]:
            last = out[-1]
            last[1] = max(last[1], e)
            last[2] += 1
            if label not in last[3] and len(last[3]) < 4:
                last[3].append(label)
        else:
            out.append([s, e, 1, [label]])
    return [tuple(x) for x in out]


def device_lanes(result, cluster) -> dict[int, Lanes]:
    """Device index -> its Lanes, from `result.trace_events` (a SimResult simulated with trace=True)."""
    ids = {d.id: d.index for d in cluster.devices}
    lanes = {d.index: Lanes() for d in cluster.devices}
    comm: dict[tuple[int, str], list] = {}
    for ev in result.trace_events:
        if ev.get("ph") != "X":
            continue
        start, dur = ev["ts"] / 1e3, ev["dur"] / 1e3
        if ev["pid"] == COMPUTE_PID:
            rows = (ev.get("args") or {}).get("rows")
            lanes[ev["tid"]].compute.append((ev.get("cat", ""), start, dur, ev["name"], rows))
        elif ev["pid"] == NETWORK_PID:
            link = cluster.links[ev["tid"]]
            kind = "sync" if ev["name"].startswith(("sync", "sfb")) else "transfer"
            for end in {link.src, link.dst}:
                if end in ids:
                    comm.setdefault((ids[end], kind), []).append((start, start + dur, ev["name"]))
    for (d, kind), ivs in comm.items():
        setattr(lanes[d], kind, _merge(ivs))
    return lanes


def timeline_svg(data, classes) -> str:
    """The figure (module docstring) as an <svg> element."""
    ids = [d.id for d in data.cluster.devices]
    span = data.span_ms or 1.0
    lanes = device_lanes(data.result, data.cluster)
    drawn = classes[:MAX_CLASSES_DRAWN]
    scale = PLOT_PX / span
    height = 30 + BLOCK_PX * len(drawn) + 10
    out = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{LABEL_PX + PLOT_PX + 20}" '
           f'height="{height}"{attrs(data_span_ms=num(span))}>']
    for t in nice_ticks(span):
        x = LABEL_PX + t * scale
        out.append(f'<line x1="{x:.1f}" y1="18" x2="{x:.1f}" y2="{height - 6}" stroke="#ddd"/>')
        out.append(text(x, 13, f"{t:g} ms", "middle", 10))
    for k, c in enumerate(drawn):
        d = c.first
        y = 24 + k * BLOCK_PX
        members = [ids[i] for i in c.members]
        idle = max(span - c.busy_ms, 0.0)
        label = f"{id_span(members)}" + (f" (x {len(members)})" if len(members) > 1 else "")
        out.append(f'<g class="lane"{attrs(data_device=ids[d], data_busy_ms=num(c.busy_ms), data_idle_ms=num(idle))}>')
        out.append(text(4, y + 12, label, size=11, font_weight="bold"))
        out.append(text(4, y + 26, f"{c.type_name}: busy {c.busy_ms:.1f} ms, idle {idle:.1f} ms", size=10))
        out.append(rect(LABEL_PX, y, PLOT_PX, 18, IDLE_COLOUR, f"{ids[d]}: idle {idle:.2f} ms of {span:.2f} ms"))
        for kind, s, dur, name, rows in lanes[d].compute:
            rtxt = f", {rows} rows" if rows is not None else ""
            out.append(rect(LABEL_PX + s * scale, y, max(dur * scale, 0.5), 18, KIND_COLOURS.get(kind, "#999"),
                            f"{name}{rtxt}: {dur:.3f} ms from {s:.3f} ms", data_kind=kind, data_ms=num(dur)))
        for lane, dy in (("sync", 21), ("transfer", 30)):
            out.append(rect(LABEL_PX, y + dy, PLOT_PX, 7, "#f7f7f7"))
            for s, e, n, labels in getattr(lanes[d], lane):
                more = f" (+{n - len(labels)} more flows)" if n > len(labels) else ""
                out.append(rect(LABEL_PX + s * scale, y + dy, max((e - s) * scale, 0.5), 7, KIND_COLOURS[lane],
                                f"{lane}: {', '.join(labels)}{more}: {e - s:.3f} ms from {s:.3f} ms",
                                data_kind=lane, data_ms=num(e - s)))
        out.append("</g>")
    out.append("</svg>")
    legend = " ".join(f'<span class="chip"><span class="bar" style="background:{KIND_COLOURS[k]}"></span>{n}</span>'
                      for k, n in (("fwd", "forward"), ("bwd", "backward"), ("update", "optimizer update"),
                                   ("sync", "gradient sync"), ("transfer", "activation/gradient transfer")))
    legend += f' <span class="chip"><span class="bar" style="background:{IDLE_COLOUR}"></span>idle</span>'
    note = ""
    if len(classes) > len(drawn):
        note = (f'<p class="note">{len(classes) - len(drawn)} more device classes are not drawn; '
                f'their busy and idle times are in the memory section\'s device list.</p>')
    return f'<p class="legend">{legend}</p>' + "\n".join(out) + note
