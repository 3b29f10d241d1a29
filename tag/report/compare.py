"""The plan against every baseline: one bar per strategy, length = simulated iteration ms (shorter is faster),
with the time to one decimal and the speed-up of the plan over it. A strategy that runs out of memory has no bar
length of its own: it is drawn hatched (at most as long as the slowest strategy that fits), marked 'out of memory'
with the time it would take if it fit.
Each row carries ``data-name``, ``data-ms`` ('inf' when out of memory) and ``data-fit-ms``.
"""

from __future__ import annotations

import math

from tag.report.svg import attrs, esc, fmt_ms, num

BAR_PX = 760


def compare_html(data) -> str:
    """The bars (module docstring): the plan first, then the baselines in their order."""
    entries = [("plan", data.result)] + list(data.baselines.items())
    fits = [r.iteration_ms for _, r in entries if math.isfinite(r.iteration_ms)]
    top = max(fits or [r.fit_iteration_ms for _, r in entries if math.isfinite(r.fit_iteration_ms)] or [1.0])
    plan_ms = data.result.iteration_ms
    rows = []
    for name, r in entries:
        ms, fit = r.iteration_ms, r.fit_iteration_ms
        w = BAR_PX * min(fit if math.isfinite(fit) else top, top) / top
        if not math.isfinite(ms):
            note = f"out of memory (would take {fit:.1f} ms)"
            style = "background:repeating-linear-gradient(45deg,#ccc,#ccc 4px,#eee 4px,#eee 8px)"
        else:
            vs = ""
            if name != "plan" and math.isfinite(plan_ms) and plan_ms > 0:
                vs = f", {ms / plan_ms:.2f}x the plan's time"
            note = f"{fmt_ms(ms)}{vs}"
            style = f"background:{'#2166AC' if name == 'plan' else '#9ECAE1'}"
        rows.append(f'<div class="cmp"{attrs(data_name=name, data_ms=num(ms), data_fit_ms=num(fit))}>'
                    f'<span class="lbl">{esc(name)}</span><span class="fill" style="width:{w:.0f}px;{style}"></span>'
                    f'<span class="val">{esc(note)}</span></div>')
    return f'<div class="cmps">{"".join(rows)}</div>'
