"""The ablation table (`tag bench --ablate`): one row per case with each part's iteration ms, the bound and the
share of the gain each part earns, then the geomean summary the search is judged by.

Summary lines (geomeans over the cases where both times are finite):
  * full / start and tree (GNN) / tree (uniform): how much the whole search and the GNN's priors earn;
  * (tree+refine) vs (start+refine) on the cases whose start leaves >= 20 % headroom over the compute bound:
    what the tree adds on top of starts and refinement where there is room to gain; and the same on the cases
    with >= 20 % over the larger of the compute bound and the latency floor (`tag.bench.ideal`), the room that
    is there once the launches a dependency chain pays are counted;
  * planning seconds of the full search (`plan()` alone: no model loading or process start), median and max over
    the cases, next to start+refine's.
"""

from __future__ import annotations

import math

from tag.bench.ablate import CHAIN, PARTS, AblationCase

HEADROOM_MIN = 0.20  # cases whose start is at least 20 % above the compute bound


def _ms(v: float) -> str:
    return "OOM" if v == math.inf else ("-" if not math.isfinite(v) else f"{v:.2f}")


def _secs(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v:.1f}"


def _median(sorted_values: list[float]) -> float:
    n = len(sorted_values)
    return sorted_values[n // 2] if n % 2 else 0.5 * (sorted_values[n // 2 - 1] + sorted_values[n // 2])


def _pct(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{100 * v:.0f}%"


def geomean_ratio(cases: list[AblationCase], num: str, den: str) -> tuple[float, int]:
    """Geomean of ms[den] / ms[num] (a speedup of `num` over `den`) over cases where both are finite; (nan, 0)
    when none."""
    logs = [math.log(c.ms[den] / c.ms[num]) for c in cases if c.error is None
            and all(math.isfinite(c.ms.get(k, math.nan)) and c.ms.get(k, 0) > 0 for k in (num, den))]
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else (math.nan, 0)


def ablation_markdown(cases: list[AblationCase]) -> str:
    """The table and summary (module docstring)."""
    share_cols = list(CHAIN[1:]) + ["refine alone"]
    head = ["case", "batch", "settings", *PARTS, "bound", "headroom", "latency floor", "headroom (floor)",
            *[f"share: {s}" for s in share_cols],
            "s: start+refine", "s: full"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        if c.error is not None:
            lines.append(f"| {c.model} on {c.topology} | - | {c.settings.label()} | "
                         + " | ".join([f"error: {c.error}"] + [""] * (len(head) - 4)) + " |")
            continue
        sh = c.shares()
        name = f"{c.model} on {c.topology}" + (f" ({c.precision})" if c.precision else "")
        capped = [p for p in PARTS if c.capped.get(p)]
        cells = [name, str(c.batch_size or "-"), c.settings.label(), *[_ms(c.ms.get(p, math.nan)) for p in PARTS],
                 _ms(c.bound_ms), _pct(c.headroom), _ms(c.floor_ms), _pct(c.headroom_floor),
                 *[_pct(sh.get(s, math.nan)) for s in share_cols],
                 *[_secs(c.seconds.get(p, math.nan)) for p in ("start+refine", "full")]]
        if capped:
            cells[-1] += f" (capped: {', '.join(capped)})"
        lines.append("| " + " | ".join(cells) + " |")
    room = [c for c in cases if c.error is None and math.isfinite(c.headroom) and c.headroom >= HEADROOM_MIN]
    full, n_full = geomean_ratio(cases, "full", "start")
    gnn, n_gnn = geomean_ratio(cases, "tree (GNN)", "tree (uniform)")
    tree, n_tree = geomean_ratio(room, "tree+refine", "start+refine")
    floored = [c for c in cases if c.error is None and math.isfinite(c.headroom_floor)]
    room_f = [c for c in floored if c.headroom_floor >= HEADROOM_MIN]
    tree_f, n_tree_f = geomean_ratio(room_f, "tree+refine", "start+refine")
    lines += ["", f"- full over start: {_geomean(full, n_full)}",
              f"- tree (GNN) over tree (uniform): {_geomean(gnn, n_gnn)}",
              f"- tree+refine over start+refine, on the {len(room)} cases with >= {100 * HEADROOM_MIN:.0f}% headroom "
              f"over the bound: {_geomean(tree, n_tree)}"]
    if floored:
        lines.append(f"- tree+refine over start+refine, on the {len(room_f)} of {len(floored)} cases with a latency "
                     f"floor and >= {100 * HEADROOM_MIN:.0f}% headroom over max(bound, floor): "
                     f"{_geomean(tree_f, n_tree_f)}")
    for part in ("start+refine", "full"):
        secs = sorted(c.seconds[part] for c in cases if c.error is None and part in c.seconds)
        if secs:
            lines.append(f"- planning seconds ({part}, plan() alone): median {_median(secs):.1f}, max {secs[-1]:.1f} "
                         f"over {len(secs)} cases")
    return "\n".join(lines) + "\n"


def _geomean(ratio: float, n: int) -> str:
    """'1.019x geomean over 125 cases', or what to say when no case has both columns yet."""
    return f"{ratio:.3f}x geomean over {n} cases" if n else "no case has both columns yet"


def ablation_report(cases: list[AblationCase], commands: list[str] | None = None,
                    missing: list[str] | None = None) -> str:
    """The datasets cases' table and summary, then the random clusters' (`ablation_markdown` each), the cases
    still `missing` and the commits of the code that ran them (from the results file)."""
    random = [c for c in cases if c.random_seed is not None]
    named = [c for c in cases if c.random_seed is None]
    parts = []
    if named or not random:
        parts += ["## Datasets models x topologies\n", ablation_markdown(named)]
    if random:
        seeds = sorted({c.random_seed for c in random})
        parts += [f"## Random clusters (seeds {', '.join(map(str, seeds))})\n", ablation_markdown(random)]
    if missing:
        parts += [f"Not run yet ({len(missing)}): " + ", ".join(missing) + "\n"]
    commits = sorted({c.commit or "unknown" for c in cases})
    if cases:
        parts += [f"Code: commit {', '.join(commits)} (as recorded per case).\n"]
    if commands:
        parts += ["Each column is a `tag plan` command line:\n\n" + "\n".join(f"    {c}" for c in commands) + "\n"]
    return "\n".join(parts)
