"""Small helpers to write inline SVG and HTML by hand: escaping, numbers, colours, ticks.

Numbers a test reads go into ``data-*`` attributes as `num` (Python's shortest round-trip repr, so
``float(attr)`` gives back the exact figure); the text a person reads is rounded.
"""

from __future__ import annotations

import math
from html import escape

# colour per device type, by order of first appearance in the topology (colour-blind-safe Okabe-Ito + extras)
TYPE_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#7F7F7F",
                "#332288", "#882255", "#44AA99", "#999933"]
KIND_COLOURS = {"fwd": "#4C78A8", "bwd": "#F58518", "update": "#54A24B", "sync": "#B279A2", "transfer": "#72B7B2"}
IDLE_COLOUR = "#EEEEEE"


def esc(text) -> str:
    """Text escaped for HTML/SVG content and double-quoted attributes."""
    return escape(str(text), quote=True)


def num(x: float) -> str:
    """A figure for a data-* attribute: 'inf' / 'nan' when not finite, else repr (exact round trip)."""
    x = float(x)
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    return repr(x)


def attrs(**kv) -> str:
    """' k="v"' pairs, underscores in names written as dashes (data_ms -> data-ms); None values left out."""
    return "".join(f' {k.replace("_", "-")}="{esc(v)}"' for k, v in kv.items() if v is not None)


def rect(x: float, y: float, w: float, h: float, fill: str, title: str | None = None, **kv) -> str:
    """An SVG rect (coordinates rounded to 0.1 px) with an optional hover <title>."""
    inner = f"<title>{esc(title)}</title>" if title else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.0):.1f}" height="{h:.1f}" fill="{fill}"{attrs(**kv)}'
            + (f">{inner}</rect>" if inner else "/>"))


def text(x: float, y: float, s: str, anchor: str = "start", size: int = 12, **kv) -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{attrs(**kv)}>{esc(s)}</text>'


def type_colours(cluster) -> dict[str, str]:
    """Device type name -> colour, by first appearance in topology order."""
    out: dict[str, str] = {}
    for d in cluster.devices:
        if d.type.name not in out:
            out[d.type.name] = TYPE_COLOURS[len(out) % len(TYPE_COLOURS)]
    return out


def heat(frac: float) -> str:
    """A colour from light grey (0) through orange to dark red (1) for a traffic share in [0, 1]."""
    f = min(max(frac, 0.0), 1.0)
    stops = [(0.0, (200, 200, 200)), (0.5, (245, 150, 40)), (1.0, (180, 20, 20))]
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if f <= b:
            t = (f - a) / (b - a)
            r, g, bl = (round(ca[i] + t * (cb[i] - ca[i])) for i in range(3))
            return f"#{r:02x}{g:02x}{bl:02x}"
    return "#b41414"


def nice_ticks(hi: float, n: int = 6) -> list[float]:
    """About n round tick values from 0 to `hi` (steps of 1, 2 or 5 x 10^k)."""
    if not hi > 0 or not math.isfinite(hi):
        return [0.0]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(hi / step + 1e-9) + 1)]


def fmt_ms(ms: float) -> str:
    """Milliseconds for people: one decimal ('212.4 ms'); 'out of memory' for inf."""
    return f"{ms:.1f} ms" if math.isfinite(ms) else "out of memory"


def fmt_bytes(b: float) -> str:
    """Bytes for people in 10^k units: '4.7 MB', '1.2 GB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"
