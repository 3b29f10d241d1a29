"""Per-device memory: the simulated peak against usable memory (0.92 x memory_gb, `DeviceType.usable_memory_bytes`),
one bar per device class, in 10^9-byte units. Below the bars, every device with its exact figures
(``data-device``, ``data-peak-gb``, ``data-usable-gb``, ``data-busy-ms``) in an expandable list.
"""

from __future__ import annotations

from tag.report.classes import id_span
from tag.report.svg import attrs, esc, num

BAR_PX = 700


def _colour(ratio: float) -> str:
    return "#54A24B" if ratio < 0.8 else ("#F58518" if ratio <= 1.0 else "#D62728")


def memory_html(data, classes) -> str:
    """The bars and the device list (module docstring)."""
    ids = [d.id for d in data.cluster.devices]
    top = max([max(c.peak_gb, c.usable_gb) for c in classes] + [1e-12])
    rows = []
    for c in classes:
        ratio = c.peak_gb / c.usable_gb if c.usable_gb > 0 else float("inf")
        members = [ids[i] for i in c.members]
        label = id_span(members) + (f" (x {len(members)})" if len(members) > 1 else "")
        used_px, cap_px = BAR_PX * c.peak_gb / top, BAR_PX * c.usable_gb / top
        over = " OUT OF MEMORY" if c.peak_gb > c.usable_gb else ""
        rows.append(
            f'<div class="mem"{attrs(data_devices=" ".join(members), data_peak_gb=num(c.peak_gb), data_usable_gb=num(c.usable_gb))}>'
            f'<span class="lbl">{esc(label)} <small>{esc(c.type_name)}</small></span>'
            f'<span class="track" style="width:{cap_px:.0f}px" title="usable {c.usable_gb:.3g} GB"></span>'
            f'<span class="fill" style="width:{min(used_px, BAR_PX):.0f}px;background:{_colour(ratio)}" '
            f'title="peak {c.peak_gb:.4g} GB of {c.usable_gb:.4g} GB usable ({100 * ratio:.1f}%)"></span>'
            f'<span class="val" style="left:{max(cap_px, used_px) + 8:.0f}px">{c.peak_gb:.3g} / {c.usable_gb:.3g} GB '
            f'({100 * ratio:.0f}%){over}</span></div>')
    span = data.span_ms
    devs = []
    for c in classes:
        for i in c.members:
            devs.append(f'<tr class="dev"{attrs(data_device=ids[i], data_peak_gb=num(c.peak_gb), data_usable_gb=num(c.usable_gb), data_busy_ms=num(c.busy_ms))}>'
                        f'<td>{esc(ids[i])}</td><td>{esc(c.type_name)}</td><td>{c.peak_gb:.4g}</td>'
                        f'<td>{c.usable_gb:.4g}</td><td>{c.busy_ms:.2f}</td><td>{max(span - c.busy_ms, 0.0):.2f}</td></tr>')
    table = (f'<details><summary>all {len(devs)} devices</summary><table class="devs"><tr><th>device</th><th>type</th>'
             f'<th>peak GB</th><th>usable GB</th><th>busy ms</th><th>idle ms</th></tr>{"".join(devs)}</table></details>')
    return f'<div class="mems">{"".join(rows)}</div>' + table
