"""The cluster as a graph (inline SVG): machines as boxes holding their devices (coloured by type), switches above,
and every link drawn with a width and colour set by the plan's traffic over it (both directions summed).

Up to MAX_MACHINES machines each get a box; above that, machines of the same kind whose devices fall in the same
device classes and that hang off the same switches share one box ('m0 … m63 (x 64)') whose links show the mean
traffic (the title gives the range). Every directed link's bytes are listed exactly in the table below the figure
(``data-link="src->dst" data-bytes``), 0 for a link no flow crossed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.report.classes import device_classes
from tag.report.svg import attrs, esc, fmt_bytes, heat, num, text, type_colours

MAX_MACHINES = 16
WIDTH_PX = 1320
DEV_PITCH_PX = 30
DEVS_PER_ROW = 8


@dataclass
class _Unit:
    machines: list  # Machine objects drawn as one box, first = representative
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0


def _undirected_bytes(link_bytes: dict[str, float]) -> dict[frozenset, float]:
    out: dict[frozenset, float] = {}
    for key, b in link_bytes.items():
        src, _, dst = key.partition("->")
        k = frozenset((src, dst))
        out[k] = out.get(k, 0.0) + b
    return out


def _neighbours(cluster) -> dict[str, set[str]]:
    nb: dict[str, set[str]] = {}
    for l in cluster.links:
        nb.setdefault(l.src, set()).add(l.dst)
        nb.setdefault(l.dst, set()).add(l.src)
    return nb


def _units(cluster, strategy, result) -> list[_Unit]:
    if len(cluster.machines) <= MAX_MACHINES:
        return [_Unit([m]) for m in cluster.machines]
    cls_of = {}
    for c, dc in enumerate(device_classes(cluster, strategy, result)):
        for d in dc.members:
            cls_of[d] = c
    nb = _neighbours(cluster)
    dev_ids = {d.id for d in cluster.devices}
    groups: dict[tuple, list] = {}
    for m in cluster.machines:
        key = (tuple(cls_of[i] for i in m.device_indices), m.intra_bandwidth_gbps, m.nic_bandwidth_gbps,
               tuple(sorted(n for n in nb.get(m.name, ()) if n not in dev_ids and n not in
                            {x.name for x in cluster.machines})))
        groups.setdefault(key, []).append(m)
    return [_Unit(ms) for ms in groups.values()]


def _switch_levels(cluster) -> dict[str, int]:
    """Switch name -> hops from the nearest machine (1 = a machine's switch)."""
    nb = _neighbours(cluster)
    dev_ids = {d.id for d in cluster.devices}
    machines = {m.name for m in cluster.machines}
    level: dict[str, int] = {}
    frontier = list(machines)
    depth = 0
    seen = set(machines) | dev_ids
    while frontier:
        depth += 1
        nxt = []
        for n in frontier:
            for o in nb.get(n, ()):
                if o not in seen:
                    seen.add(o)
                    level[o] = depth
                    nxt.append(o)
        frontier = nxt
    return level


def _line(x1, y1, x2, y2, frac, title, **kv) -> str:
    w = 1.0 + 7.0 * frac
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{heat(frac)}" '
            f'stroke-width="{w:.1f}" stroke-linecap="round"{attrs(**kv)}><title>{esc(title)}</title></line>')


def _mean_range(values: list[float]) -> tuple[float, float, float]:
    return sum(values) / len(values), min(values), max(values)


def _link_title(a: str, b: str, vals: list[float]) -> str:
    mean, lo, hi = _mean_range(vals)
    if len(vals) == 1:
        return f"{a} <-> {b}: {fmt_bytes(mean)} (both directions)"
    return f"{a} <-> {b} (x {len(vals)}): mean {fmt_bytes(mean)}, {fmt_bytes(lo)} - {fmt_bytes(hi)} (both directions)"


def cluster_svg(cluster, strategy, result) -> str:
    """The figure (module docstring) as an <svg> element."""
    colours = type_colours(cluster)
    und = _undirected_bytes(result.link_bytes)
    units = _units(cluster, strategy, result)
    levels = _switch_levels(cluster)
    max_level = max(levels.values(), default=0)
    top = 20 + 70 * max_level
    # machine boxes, flowed left to right
    x, y, row_h = 10.0, float(top), 0.0
    for u in units:
        n = len(u.machines[0].device_indices)
        per_row = min(n, DEVS_PER_ROW)
        u.w = max(160.0, per_row * DEV_PITCH_PX + 24)
        u.h = 48 + ((n + DEVS_PER_ROW - 1) // DEVS_PER_ROW) * DEV_PITCH_PX + 8
        if x + u.w > WIDTH_PX and x > 10:
            x, y = 10.0, y + row_h + 24
            row_h = 0.0
        u.x, u.y = x, y
        x += u.w + 16
        row_h = max(row_h, u.h)
    height = y + row_h + 16
    used_px = max([u.x + u.w for u in units] + [0.0]) + 10  # switches centred over the boxes
    pos: dict[str, tuple[float, float]] = {}
    for lv in range(1, max_level + 1):
        names = [s for s, v in levels.items() if v == lv]
        for i, s in enumerate(sorted(names)):
            pos[s] = ((i + 1) * used_px / (len(names) + 1), 20 + 70 * (max_level - lv) + 18)
    machine_unit = {}
    for u in units:
        for m in u.machines:
            machine_unit[m.name] = u
    dev_ids = {d.id for d in cluster.devices}

    def frac_of(v: float) -> float:
        return v / peak_bytes if peak_bytes > 0 else 0.0

    # the bytes each drawn line shows: mean over the machines of a box
    lines: list[tuple] = []  # (x1, y1, x2, y2, values, a, b)
    drawn_pairs = set()
    for l in cluster.links:
        pair = frozenset((l.src, l.dst))
        if pair in drawn_pairs:
            continue
        drawn_pairs.add(pair)
        a, b = l.src, l.dst
        if a in dev_ids or b in dev_ids:
            continue  # device links are drawn inside the boxes
        ua, ub = machine_unit.get(a), machine_unit.get(b)
        if ua is not None and ub is None or ub is not None and ua is None:
            u, mname, other = (ua, a, b) if ua is not None else (ub, b, a)
            if u.machines[0].name != mname:
                continue
            vals = [und.get(frozenset((m.name, other)), 0.0) for m in u.machines]
            sx, sy = pos.get(other, (u.x + u.w / 2, top - 30))
            lines.append((u.x + u.w / 2, u.y, sx, sy, vals, mname if len(u.machines) == 1 else
                          f"{mname} … {u.machines[-1].name}", other))
        elif ua is not None and ub is not None:
            if ua is ub and len(ua.machines) > 1 and ua.machines[0].name not in (a, b):
                continue
            lines.append((ua.x + ua.w / 2, ua.y, ub.x + ub.w / 2, ub.y, [und.get(pair, 0.0)], a, b))
        else:
            (x1, y1), (x2, y2) = pos.get(a, (0, 0)), pos.get(b, (0, 0))
            lines.append((x1, y1, x2, y2, [und.get(pair, 0.0)], a, b))
    dev_lines = []  # (unit, local index, values)
    for u in units:
        for k in range(len(u.machines[0].device_indices)):
            vals = []
            for m in u.machines:
                d = cluster.devices[m.device_indices[k]]
                vals.append(und.get(frozenset((d.id, m.name)), 0.0))
            dev_lines.append((u, k, vals))
    peak_bytes = max([_mean_range(v)[0] for *_, v, _a, _b in lines] + [_mean_range(v)[0] for *_, v in dev_lines]
                     + [0.0])

    out = [f'<svg class="cluster" xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX + 20}" height="{height:.0f}" '
           f'viewBox="0 0 {WIDTH_PX + 20} {height:.0f}">']
    for x1, y1, x2, y2, vals, a, b in lines:
        mean = _mean_range(vals)[0]
        if abs(y1 - y2) < 1 and abs(x1 - x2) > 1:  # two boxes in one row: arc above them
            mx, my = (x1 + x2) / 2, y1 - 40
            w = 1.0 + 7.0 * frac_of(mean)
            out.append(f'<path d="M{x1:.1f},{y1:.1f} Q{mx:.1f},{my:.1f} {x2:.1f},{y2:.1f}" fill="none" '
                       f'stroke="{heat(frac_of(mean))}" stroke-width="{w:.1f}"{attrs(data_pair=f"{a}<->{b}", data_bytes=num(mean))}>'
                       f'<title>{esc(_link_title(a, b, vals))}</title></path>')
        else:
            out.append(_line(x1, y1, x2, y2, frac_of(mean), _link_title(a, b, vals), data_pair=f"{a}<->{b}",
                             data_bytes=num(mean)))
    for s, (sx, sy) in pos.items():
        out.append(f'<g class="switch"><rect x="{sx - 60:.1f}" y="{sy - 14:.1f}" width="120" height="28" rx="6" '
                   f'fill="#444"/>{text(sx, sy + 4, s, "middle", 12, fill="#fff")}</g>')
    for u in units:
        m0 = u.machines[0]
        label = m0.name if len(u.machines) == 1 else f"{m0.name} … {u.machines[-1].name} (x {len(u.machines)})"
        out.append(f'<g class="machine"{attrs(data_machines=" ".join(m.name for m in u.machines))}>'
                   f'<rect x="{u.x:.1f}" y="{u.y:.1f}" width="{u.w:.1f}" height="{u.h:.1f}" rx="8" fill="#fafafa" '
                   f'stroke="#888"/>{text(u.x + 8, u.y + 16, label, size=12, font_weight="bold")}')
        hub = (u.x + u.w / 2, u.y + 24)
        n = len(m0.device_indices)
        centres = []
        row_w = min(n, DEVS_PER_ROW) * DEV_PITCH_PX
        for k, i in enumerate(m0.device_indices):
            cx = u.x + (u.w - row_w) / 2 + DEV_PITCH_PX / 2 + (k % DEVS_PER_ROW) * DEV_PITCH_PX
            cy = u.y + 48 + (k // DEVS_PER_ROW) * DEV_PITCH_PX + DEV_PITCH_PX / 2 - 6
            centres.append((cx, cy))
        for (uu, k, vals), (cx, cy) in zip([t for t in dev_lines if t[0] is u], centres):
            d = cluster.devices[m0.device_indices[k]]
            mean = _mean_range(vals)[0]
            out.append(_line(hub[0], hub[1], cx, cy, frac_of(mean), _link_title(d.id, m0.name, vals),
                             data_pair=f"{d.id}<->{m0.name}", data_bytes=num(mean)))
        out.append(f'<circle cx="{hub[0]:.1f}" cy="{hub[1]:.1f}" r="3" fill="#888"/>')
        for k, (cx, cy) in enumerate(centres):
            d = cluster.devices[m0.device_indices[k]]
            others = "" if len(u.machines) == 1 else f" (and the same device of {len(u.machines) - 1} more machines)"
            out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="10" fill="{colours[d.type.name]}" stroke="#222"'
                       f'{attrs(data_device=d.id, data_type=d.type.name)}><title>{esc(d.id + " " + d.type.name + others)}'
                       f'</title></circle>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def legend_html(cluster, result) -> str:
    """Device-type colours and the traffic scale."""
    colours = type_colours(cluster)
    items = "".join(f'<span class="chip"><span class="dot" style="background:{c}"></span>{esc(t)}</span>'
                    for t, c in colours.items())
    und = _undirected_bytes(result.link_bytes)
    top = max(und.values(), default=0.0)
    scale = (f'<span class="chip">traffic: <span class="bar" style="background:{heat(0)}"></span>0 '
             f'<span class="bar" style="background:{heat(0.5)}"></span>{esc(fmt_bytes(top / 2))} '
             f'<span class="bar" style="background:{heat(1)}"></span>{esc(fmt_bytes(top))} per link, both directions</span>')
    return f'<p class="legend">{items} {scale}</p>'


def links_table(cluster, result) -> str:
    """Every directed link with its bandwidth and the bytes the iteration moves over it (exact in data-bytes)."""
    seen = set()
    rows = []
    for l in cluster.links:
        key = f"{l.src}->{l.dst}"
        if key in seen:
            continue
        seen.add(key)
        b = float(result.link_bytes.get(key, 0.0))
        rows.append(f'<tr class="link"{attrs(data_link=key, data_bytes=num(b))}><td>{esc(key)}</td>'
                    f'<td>{l.bandwidth_gbps:g}</td><td>{esc(fmt_bytes(b))}</td></tr>')
    return (f'<details><summary>all {len(rows)} directed links</summary><table class="links"><tr><th>link</th>'
            f'<th>Gb/s</th><th>bytes per iteration</th></tr>{"".join(rows)}</table></details>')
