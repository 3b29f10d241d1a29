"""How the plan was found: the plan's ``search`` block as recorded, and the search's part-by-part gains.

plan.json's search block (docs/plan.md) records the method, playouts, simulations, seconds, seed and GNN. Any
entry of it that holds per-part iteration times -- an object {part: ms} or a list of objects each with a name
('part' or 'name') and an 'iteration_ms' -- is drawn as bars with each part's gain over the part before it;
when there is none the section says the gains are not recorded.
"""

from __future__ import annotations

import math

from tag.report.svg import attrs, esc, num

BAR_PX = 600


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def search_parts(search: dict | None) -> tuple[str, list[tuple[str, float]]] | None:
    """(key, [(part, iteration ms)]) of the first entry of `search` that holds per-part times, else None."""
    for key, v in (search or {}).items():
        if isinstance(v, dict) and v and all(_number(x) for x in v.values()):
            return key, [(str(k), float(x)) for k, x in v.items()]
        if isinstance(v, list) and v and all(isinstance(x, dict) and _number(x.get("iteration_ms")) and
                                              isinstance(x.get("part", x.get("name")), str) for x in v):
            return key, [(x.get("part", x.get("name")), float(x["iteration_ms"])) for x in v]
    return None


def _scalar_text(v) -> str | None:
    """A search entry as text: scalars as they are, a non-empty list of scalars joined by '; '; None for anything else."""
    if isinstance(v, list):
        if not v:
            return None
        return "; ".join(str(x) for x in v) if all(not isinstance(x, (dict, list)) for x in v) else None
    return None if isinstance(v, dict) else str(v)


def search_html(plan: dict) -> str:
    """The recorded search block as a table, then the gains (module docstring)."""
    search = plan.get("search") if isinstance(plan.get("search"), dict) else None
    if not search:
        return '<p class="note">This plan records no search block (it was written by hand or by another tool).</p>'
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{esc(_scalar_text(v))}</td></tr>" for k, v in search.items()
                    if _scalar_text(v) is not None)
    out = [f'<table class="kv">{cells}</table>']
    parts = search_parts(search)
    if parts is None:
        out.append('<p class="gains-none" data-gains="not recorded">Part-by-part gains: not recorded in this plan '
                   '(its search block holds no per-part iteration times).</p>')
        return "".join(out)
    key, items = parts
    top = max(ms for _, ms in items) or 1.0
    rows = []
    prev = None
    for name, ms in items:
        gain = ""
        if prev:
            pct = 100 * (prev - ms) / prev
            gain = f", {abs(pct):.1f}% {'faster' if pct >= 0 else 'slower'} than the part before"
        rows.append(f'<div class="cmp"{attrs(data_part=name, data_ms=num(ms))}><span class="lbl">{esc(name)}</span>'
                    f'<span class="fill" style="width:{BAR_PX * ms / top:.0f}px;background:#9ECAE1"></span>'
                    f'<span class="val">{ms:.1f} ms{esc(gain)}</span></div>')
        prev = ms
    out.append(f'<p>Part by part (search.{esc(key)}):</p><div class="cmps">{"".join(rows)}</div>')
    return "".join(out)
