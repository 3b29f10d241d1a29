"""The pipeline section: one table row per stage of a pipelined plan (`tag.strategy.pipeline`).

Each row: the stage's groups and devices, the rows per micro-batch of each of its devices in its first group, and
the simulated busy time and idle time (iteration span - busy) of its busiest and least busy device, which is where
the schedule's bubble shows. Rows carry ``data-stage``, ``data-groups`` (ids, space-separated) and ``data-devices``
(ids, space-separated) so every figure can be read back. Empty for a plan without a pipeline.
"""

from __future__ import annotations

from tag.report.classes import id_span
from tag.report.svg import attrs, esc, num


def _span(groups: tuple[int, ...]) -> str:
    """'g3', 'g0-g7' for a consecutive run, else the ids listed."""
    if len(groups) == 1:
        return f"g{groups[0]}"
    if list(groups) == list(range(groups[0], groups[-1] + 1)):
        return f"g{groups[0]}-g{groups[-1]}"
    return ", ".join(f"g{g}" for g in groups)


def pipeline_html(data) -> str:
    """The stage table and a line naming the micro-batches and schedule; "" without a pipeline."""
    pl = getattr(data.strategy, "pipeline", None)
    if pl is None:
        return ""
    ids = [d.id for d in data.cluster.devices]
    busy = data.result.busy_ms
    span = data.span_ms
    sched = pl.schedule + (f" (k = {pl.k})" if pl.schedule == "kfkb" else "")
    rows = []
    for s, st in enumerate(pl.stages):
        devs = [ids[d] for d in st.devices]
        first = data.strategy.decisions[st.groups[0]]
        micro = [first.rows[d] // pl.micro_batches for d in st.devices]
        micro_text = str(micro[0]) if len(set(micro)) == 1 else ", ".join(str(r) for r in micro)
        b = [float(busy.get(i, 0.0)) for i in devs]
        rows.append(f'<tr class="stage"{attrs(data_stage=s, data_groups=" ".join(str(g) for g in st.groups), data_devices=" ".join(devs), data_busy_max_ms=num(max(b)))}>'
                    f'<td>{s}</td><td>{esc(_span(st.groups))}</td><td>{esc(id_span(devs))} (x {len(devs)})</td>'
                    f'<td>{esc(micro_text)}</td><td>{max(b):.2f}</td><td>{max(span - min(b), 0.0):.2f}</td></tr>')
    return (f'<p class="head">{len(pl.stages)} stages, {pl.micro_batches} micro-batches, schedule {esc(sched)}</p>'
            f'<table class="stages"><tr><th>stage</th><th>groups</th><th>devices</th><th>rows per micro-batch</th>'
            f'<th>busiest device busy ms</th><th>most idle device idle ms</th></tr>{"".join(rows)}</table>'
            f'<p class="note">Idle time is the iteration span ({span:.2f} ms) minus a device\'s busy time: the '
            f'schedule\'s bubble, waits for other stages and for gradient syncs.</p>')
