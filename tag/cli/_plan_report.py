"""Human report of `tag plan`: the decisions (runs of equal decisions merged) and the plan against every baseline."""

from __future__ import annotations

import math

from tag.textfmt import table


def describe_decision(dec, cluster) -> str:
    """One line for a decision, e.g. '64 rows x 512 devices, hierarchical' or
    'rows 48 x 2, 16 x 2, 8 x 4 on all 8 devices, ps on m0/0' (row counts in topology order, runs merged)."""
    devs = dec.devices
    if len(devs) == 1:
        return f"placed on {cluster.devices[devs[0]].id}"
    everyone = len(devs) == cluster.n_devices
    counts = [dec.rows[d] for d in devs]
    if len(set(counts)) == 1:
        rows = f"{counts[0]} rows x {len(devs)} devices" + ("" if everyone else f" ({_id_span(devs, cluster)})")
    else:
        on = f"all {len(devs)} devices" if everyone else f"{len(devs)} devices ({_id_span(devs, cluster)})"
        rows = f"rows {row_runs_text(counts)} on {on}"
    sync = {None: "no sync", "auto": "collectives by cost"}.get(dec.sync, dec.sync)
    if dec.sync == "ps" and dec.server is not None:
        sync += f" on {cluster.devices[dec.server].id}"
    sfb = f", SFB on {len(dec.sfb)} op(s)" if dec.sfb else ""
    memory = (f", ZeRO-{dec.zero}" if dec.zero else "") + (", recompute" if dec.recompute else "")
    return f"{rows}, {sync}{sfb}{memory}{shard_text(dec)}"


def shard_text(dec) -> str:
    """', heads shard 2 replicas x 2 (0.25 / 0.75)' for a sharded decision (shares by position), '' otherwise."""
    sh = dec.shard
    if sh is None:
        return ""
    shares = " / ".join(f"{r:.3g}" for r in sh.ratios)
    reps = f"{len(sh.replicas)} replica{'s' if len(sh.replicas) > 1 else ''}"
    return f", {sh.split} shard {reps} x {sh.k} ({shares})"


MAX_DECISION_LINES = 60  # the printed plan lists at most this many runs of groups (the plan file has them all)
MAX_RUNS = 8  # more runs than this print as counts per row value


def row_runs_text(counts: list[int]) -> str:
    """Row counts in device order as runs of equal counts: [96, 96, 32, 32, 32] -> '96 x 2, 32 x 3'.

    When there are more than MAX_RUNS runs, the counts are grouped by value instead (largest first), e.g.
    '16 x 256, 8 x 256 (interleaved)'; with more than MAX_RUNS distinct values, the range and the total.
    """
    runs: list[list[int]] = []
    for c in counts:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    if len(runs) <= MAX_RUNS:
        return ", ".join(f"{c} x {n}" for c, n in runs)
    per_value: dict[int, int] = {}
    for c in counts:
        per_value[c] = per_value.get(c, 0) + 1
    if len(per_value) <= MAX_RUNS:
        return ", ".join(f"{c} x {n}" for c, n in sorted(per_value.items(), reverse=True)) + " (interleaved)"
    return f"{min(counts)}-{max(counts)} each ({sum(counts)} in all)"


def worst_overflow(result, cluster) -> tuple[str, float, float]:
    """(device id, peak GB, usable GB) of the device with the largest peak / usable memory ratio
    (the first such device in topology order on ties)."""
    best = None
    for d in cluster.devices:
        usable_gb = d.type.usable_memory_bytes / 1e9
        peak_gb = float(result.peak_memory_gb.get(d.id, 0.0))
        ratio = peak_gb / usable_gb if usable_gb > 0 else math.inf
        if best is None or ratio > best[0]:
            best = (ratio, d.id, peak_gb, usable_gb)
    return best[1], best[2], best[3]


def overflow_ratio(result, cluster) -> float:
    """max over devices of peak / usable memory: above 1 the strategy does not fit."""
    _, peak_gb, usable_gb = worst_overflow(result, cluster)
    return peak_gb / usable_gb if usable_gb > 0 else math.inf


def least_overflowing(res, cluster) -> str | None:
    """The baseline whose overflow ratio is strictly below the plan's and least of all baselines (ties: by name),
    or None when the plan overflows least. For when nothing fits: the search's value clips the overflow
    (tag.search.evaluate), so the plan it returns need not be the least-overflowing strategy it saw."""
    if not res.baselines:
        return None
    name = min(res.baselines, key=lambda n: (overflow_ratio(res.baselines[n][1], cluster), n))
    return name if overflow_ratio(res.baselines[name][1], cluster) < overflow_ratio(res.result, cluster) else None


def oom_line(res, cluster, output_path: str | None, baseline: str | None = None) -> str:
    """The one stderr line of `tag plan` when the plan does not fit in memory."""
    dev, peak_gb, usable_gb = worst_overflow(res.result, cluster)
    what = f"baseline {baseline} does not fit in memory" if baseline else "no strategy fits in memory"
    fate = f"wrote it to {output_path}" if output_path else "give -o P.json to write it"
    kind = "it" if baseline else "the least-overflowing plan"
    return f"{what}: {kind} needs {peak_gb:.3g} GB on {dev}, which has {usable_gb:.3g} GB usable; {fate}"


def _id_span(devs, cluster) -> str:
    ids = [cluster.devices[d].id for d in devs]
    return ", ".join(ids) if len(ids) <= 4 else f"{ids[0]} … {ids[-1]}"


def decision_runs(strategy) -> list[tuple[int, int, object]]:
    """(first group, last group, decision) for runs of consecutive groups with equal decisions; a group without a
    sync (no parameters) joins a run of otherwise equal decisions, which shows the run's sync."""
    runs: list[tuple[int, int, object]] = []
    for g, dec in enumerate(strategy.decisions):
        if runs:
            a, _, cur = runs[-1]
            same = cur.rows == dec.rows and cur.sfb == dec.sfb == () and \
                (cur.zero, cur.recompute, cur.shard) == (dec.zero, dec.recompute, dec.shard)
            if cur == dec or (same and (dec.sync is None or cur.sync is None or
                                        (dec.sync, dec.server) == (cur.sync, cur.server))):
                runs[-1] = (a, g, cur if cur.sync is not None else dec)
                continue
        runs.append((g, g, dec))
    return runs


def buckets_line(bucket_syncs, bucket_mb: float) -> str:
    """One line on the gradient buckets, e.g. 'buckets: 4 (cap 25 MiB, 95.3 MiB in all): ring x 3, tree x 1'."""
    if not bucket_syncs:
        return "buckets: none (no gradients to sync)"
    per: dict[str, int] = {}
    for b in bucket_syncs:
        per[b.bucket.algorithm] = per.get(b.bucket.algorithm, 0) + 1
    cap = "one per group" if bucket_mb <= 0 else f"cap {bucket_mb:g} MiB"
    total_mib = sum(b.nbytes for b in bucket_syncs) / 2 ** 20
    return (f"buckets: {len(bucket_syncs)} ({cap}, {total_mib:.1f} MiB in all): "
            + ", ".join(f"{a} x {n}" for a, n in per.items()))


def comparison_rows(res, cluster, deployed_ms: dict | None = None) -> list[list]:
    """Rows of the plan-vs-baselines table: name, ms, samples/s, speedup over dp-even and dp-proportional,
    peak memory (GB, worst device) and OOM; with `deployed_ms` (name -> the step as deploy runs it, "plan" the
    plan written), that figure last ("-" where it has none)."""
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
    if deployed_ms is not None:
        out = [r + [deployed_ms.get(r[0], "-")] for r in out]
    return out


def _x(v: float) -> str:
    return "-" if v != v else f"{v:.2f}x"


def memory_line(res) -> str:
    """One line on the plan's precision and memory decisions, e.g.
    'precision fp16 (chosen by the search); ZeRO stage 1 x 48 groups; recomputed groups: 0'."""
    from tag.search.memory_pass import decisions_summary

    prec = res.training.precision if res.training is not None else "fp32"
    how = " (chosen by the search)" if (res.precision or {}).get("by") == "search" else ""
    summary = decisions_summary(res.strategy)
    zero = ", ".join(f"stage {z} x {n} groups" for z, n in summary["zero"].items()) or "none"
    return f"precision {prec}{how}; ZeRO: {zero}; recomputed groups: {summary['recompute']}"


def report_text(inp, res, output_path: str | None, deployed=None) -> str:
    """`tag plan`'s text: decisions, buckets, the comparison table (with an "as deployed ms" column when
    `deployed`, a `tag.cli._plan_deployed.DeployedChoice`, is given, and its lines after), memory and the search's
    provenance."""
    from tag.cli._plan_deployed import deployed_lines, written_ms

    cluster = inp.cluster
    lines = [f"model {inp.model_path}: batch {inp.batch_size}, {inp.gg.n_groups} groups; cluster {cluster.name}: "
             f"{cluster.n_devices} devices; cost model {inp.cost.name}", ""]
    lines.append("decisions:")
    runs = decision_runs(res.strategy)
    for a, b, dec in runs[:MAX_DECISION_LINES]:
        span = f"group {a}" if a == b else f"groups {a}-{b}"
        lines.append(f"  {span}: {describe_decision(dec, cluster)}")
    if len(runs) > MAX_DECISION_LINES:
        lines.append(f"  ... {len(runs) - MAX_DECISION_LINES} more runs of groups (every decision is in the plan file"
                     " and in tag report's page)")
    from tag.sim.context import sim_context

    ctx = sim_context(inp.gg, cluster, inp.cost, inp.training)
    lines.append("")
    lines.append(buckets_line(ctx.bucket_syncs(res.strategy), res.strategy.bucket_mb))
    lines.append("")
    head = ["strategy", "iteration ms", "samples/s", "vs dp-even", "vs dp-prop", "peak GB", "OOM"]
    lines.append(table(comparison_rows(res, cluster, None if deployed is None else written_ms(deployed)),
                       head + ([] if deployed is None else ["as deployed ms"])))
    lines += deployed_lines(deployed)
    if res.sfb and res.sfb.get("ops"):
        try:
            from tag.compression import sfb_summary
            lines += [""] + list(sfb_summary(res.sfb))
        except ImportError:
            lines += ["", f"SFB on {len(res.sfb['ops'])} op(s)"]
    lines.append("")
    lines.append(memory_line(res))
    lines.append(f"search: {res.method}, {res.playouts} playouts, {res.simulations} simulations, "
                 f"{res.seconds:.1f} s, seed {res.seed}")
    if res.structure:
        st = res.structure
        lines.append(f"structure tree: {st['nodes']} nodes, best at {' / '.join(st['path']) or 'its root (the best start)'}"
                     f"; then {st['polish_playouts']} per-group playouts")
    if output_path:
        lines.append(f"wrote {output_path}")
    return "\n".join(lines)
