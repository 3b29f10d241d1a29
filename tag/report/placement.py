"""The placement map: op groups (rows of the table) x device classes (columns); each cell the rows each device of
the class computes for those groups, shaded by its share of the global batch.

Runs of consecutive groups with equal row maps are one table row whose first cell expands (<details>) to the
groups' ids, sync methods and op names; each column header expands to its member devices. The last column counts
the run's sync methods (e.g. 'hierarchical x 87, none x 87'). Cells carry ``data-groups="a-b"`` and ``data-rows``; headers ``data-devices`` (ids,
space-separated), so every (group, device) row count can be read back.
"""

from __future__ import annotations

from tag.report.classes import group_runs, id_span
from tag.report.svg import attrs, esc, type_colours

MAX_OPS_LISTED = 12  # op names shown per group when a run is expanded


def _shade(frac: float) -> str:
    """Background for a cell computing `frac` of the batch: white (0) to deep blue (1)."""
    f = min(max(frac, 0.0), 1.0)
    r, g, b = (round(255 - f * (255 - c)) for c in (33, 102, 172))
    return f"#{r:02x}{g:02x}{b:02x}"


def _ops_text(ops: list[str]) -> str:
    shown = ", ".join(ops[:MAX_OPS_LISTED])
    return shown + (f", … ({len(ops)} ops)" if len(ops) > MAX_OPS_LISTED else "")


def _sync_text(dec, ids: list[str]) -> str:
    """A group's gradient sync and memory decisions: 'ring', 'ps on m0/1', 'hierarchical, SFB on 2 op(s)',
    'ring, ZeRO 2, recompute', 'none' (no parameters to sync or one device)."""
    text = dec.sync or "none"
    if dec.sync == "ps" and dec.server is not None:
        text += f" on {ids[dec.server]}"
    if dec.sfb:
        text += f", SFB on {len(dec.sfb)} op(s)"
    if dec.zero:
        text += f", ZeRO {dec.zero}"
    if dec.recompute:
        text += ", recompute"
    return text


def placement_html(data, classes) -> str:
    """The table (module docstring)."""
    cluster, strategy = data.cluster, data.strategy
    colours = type_colours(cluster)
    ids = [d.id for d in cluster.devices]
    batch = data.batch_size or 1
    head = ['<th>groups</th>']
    for c in classes:
        members = [ids[i] for i in c.members]
        listing = ", ".join(members)
        head.append(f'<th class="cls"{attrs(data_devices=" ".join(members))}>'
                    f'<span class="dot" style="background:{colours[c.type_name]}"></span>{esc(c.type_name)}'
                    f'<br>{esc(id_span(members))}<br>x {len(members)}'
                    f'<details><summary>devices</summary><div class="ids">{esc(listing)}</div></details></th>')
    head.append("<th>sync</th>")
    body = []
    for a, b in group_runs(strategy):
        dec = strategy.decisions[a]
        span = f"group {a}" if a == b else f"groups {a}-{b} ({b - a + 1})"
        items = "".join(f"<li>g{g} ({esc(_sync_text(strategy.decisions[g], ids))}): {esc(_ops_text(data.group_ops[g]))}</li>"
                        for g in range(a, b + 1))
        cells = [f'<td class="grp"><details><summary>{esc(span)}</summary><ul>{items}</ul></details></td>']
        for c in classes:
            r = c.rows[a]
            cells.append(f'<td class="cell"{attrs(data_groups=f"{a}-{b}", data_rows=r)} '
                         f'style="background:{_shade(r / batch)};color:{"#fff" if r / batch > 0.55 else "#000"}">'
                         f'{r if r else ""}</td>')
        counts: dict[str, int] = {}
        for g in range(a, b + 1):
            t = _sync_text(strategy.decisions[g], ids)
            counts[t] = counts.get(t, 0) + 1
        sync = ", ".join(t if n == 1 and a == b else f"{t} x {n}" for t, n in counts.items())
        cells.append(f"<td>{esc(sync)}</td>")
        body.append(f'<tr>{"".join(cells)}</tr>')
    return (f'<div class="scroll"><table class="placement"><tr>{"".join(head)}</tr>{"".join(body)}</table></div>'
            f'<p class="note">Each cell: batch rows each device of the column computes for those groups '
            f'(global batch {data.batch_size}); darker = a larger share. An empty cell computes nothing. The last '
            f'column names the gradient syncs of its groups, with any ZeRO stage above 0 and recomputation.</p>')
