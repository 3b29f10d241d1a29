"""Human report of `tag plan`: the decisions (runs of equal decisions merged) and the plan against every baseline."""

from __future__ import annotations

import math

from tag.textfmt import table


def describe_decision(dec, cluster) -> str:
    """One line for a decision, e.g. '8 devices, rows 48/48/16/16/8/8/8/8, hierarchical'."""
    devs = dec.devices
    if len(devs) == 1:
        return f"placed on {cluster.devices[devs[0]].id}"
    rows = "/".join(str(dec.rows[d]) for d in devs)
    who = f"all {len(devs)} devices" if len(devs) == cluster.n_devices else \
        f"{len(devs)} devices ({_id_span(devs, cluster)})"
    sync = dec.sync or "no sync"
    if dec.sync == "ps" and dec.server is not None:
        sync += f" on {cluster.devices[dec.server].id}"
    sfb = f", SFB on {len(dec.sfb)} op(s)" if dec.sfb else ""
    return f"{who}, rows {rows}, {sync}{sfb}"


def _id_span(devs, cluster) -> str:
    ids = [cluster.devices[d].id for d in devs]
    return ", ".join(ids) if len(ids) <= 4 else f"{ids[0]} … {ids[-1]}"


def decision_runs(strategy) -> list[tuple[int, int, object]]:
    """(first group, last group, decision) for runs of consecutive groups with equal decisions."""
    runs = []
    for g, dec in enumerate(strategy.decisions):
        if runs and runs[-1][2] == dec:
            runs[-1] = (runs[-1][0], g, dec)
        else:
            runs.append((g, g, dec))
    return runs


def comparison_rows(res, cluster) -> list[list]:
    """Rows of the plan-vs-baselines table: name, ms, samples/s, speedup over dp-even and dp-proportional,
    peak memory (GB, worst device) and OOM."""
    ref = {name: r.iteration_ms for name, (_, r) in res.baselines.items() if not r.oom}

    def speedup(ms: float, name: str) -> float:
        base = ref.get(name)
        return base / ms if base and math.isfinite(ms) and ms > 0 else float("nan")

    def row(name: str, r) -> list:
        peak = max(r.peak_memory_gb.values(), default=0.0)
        ms = r.iteration_ms if not r.oom else float("nan")
        return [name, ms, r.samples_per_s if not r.oom else float("nan"), _x(speedup(r.iteration_ms, "dp-even")),
                _x(speedup(r.iteration_ms, "dp-proportional")), peak, r.oom]

    out = [row("plan", res.result)]
    out += [row(name, r) for name, (_, r) in res.baselines.items()]
    return out


def _x(v: float) -> str:
    return "-" if v != v else f"{v:.2f}x"


def report_text(inp, res, output_path: str | None) -> str:
    cluster = inp.cluster
    lines = [f"model {inp.model_path}: batch {inp.batch_size}, {inp.gg.n_groups} groups; cluster {cluster.name}: "
             f"{cluster.n_devices} devices; cost model {inp.cost.name}", ""]
    lines.append("decisions:")
    for a, b, dec in decision_runs(res.strategy):
        span = f"group {a}" if a == b else f"groups {a}-{b}"
        lines.append(f"  {span}: {describe_decision(dec, cluster)}")
    lines.append("")
    lines.append(table(comparison_rows(res, cluster),
                       ["strategy", "iteration ms", "samples/s", "vs dp-even", "vs dp-prop", "peak GB", "OOM"]))
    if res.sfb and res.sfb.get("ops"):
        try:
            from tag.compression import sfb_summary
            lines += [""] + list(sfb_summary(res.sfb))
        except ImportError:
            lines += ["", f"SFB on {len(res.sfb['ops'])} op(s)"]
    lines.append("")
    lines.append(f"search: {res.method}, {res.playouts} playouts, {res.simulations} simulations, "
                 f"{res.seconds:.1f} s, seed {res.seed}")
    if output_path:
        lines.append(f"wrote {output_path}")
    return "\n".join(lines)
