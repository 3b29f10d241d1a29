"""Plain-text tables for people: the one formatter every verb and summary prints with."""

from __future__ import annotations

from typing import Any, Iterable, Sequence


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain-text table with right-aligned numbers."""
    rows = [[_cell(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    def fmt(r, is_header=False):
        cells = []
        for i, c in enumerate(r):
            numeric = not is_header and _is_number(c)
            cells.append(c.rjust(widths[i]) if numeric else c.ljust(widths[i]))
        return "  ".join(cells).rstrip()
    lines = [fmt(headers, True), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def _cell(c: Any) -> str:
    if isinstance(c, bool):
        return "yes" if c else "no"
    if isinstance(c, float):
        if c != c:
            return "-"
        if abs(c) >= 100:
            return f"{c:,.1f}"
        return f"{c:.3g}" if abs(c) < 1 else f"{c:.2f}"
    if c is None:
        return "-"
    return str(c)


def _is_number(s: str) -> bool:
    try:
        float(s.replace(",", "").rstrip("x%"))
        return True
    except ValueError:
        return False
