"""Summaries of a measured profile and a measured topology: the JSON objects and human tables of `tag profile`.

Measured machine figures are set beside the catalog entry of the same device type (`tag.topology.catalog`),
as ratios measured / catalog.
"""

from __future__ import annotations

from tag.cost.profile_db import ProfileDB, interpolate, op_signature
from tag.topology.catalog import CATALOG


def _catalog(device_type: str, peak_tflops: float, memory_bandwidth_gbps: float) -> dict:
    """The catalog's figures for `device_type` and measured / catalog ratios ({} if not in the catalog)."""
    base = CATALOG.get(device_type)
    if base is None:
        return {}
    return {"peak_tflops": base.peak_tflops, "memory_bandwidth_gbps": base.memory_bandwidth_gbps,
            "peak_ratio": peak_tflops / base.peak_tflops, "memory_bandwidth_ratio": memory_bandwidth_gbps / base.memory_bandwidth_gbps}


def model_totals(db: ProfileDB, graph, rows: int) -> dict:
    """Whole-model figures at `rows` from the per-op entries: fwd/bwd ms (sum over every compute op,
    ops sharing a signature counted each time), forward FLOPs and the achieved 10^9 FLOP/s of the forward."""
    fwd = bwd = flops = 0.0
    for op in graph.ops:
        if op.is_weight_generator:
            continue
        p = db.ops.get(op_signature(op, graph))
        if p is None:
            continue
        fwd += interpolate(p.rows, p.fwd_ms, rows)
        bwd += interpolate(p.rows, p.bwd_ms, rows) if p.bwd_ms is not None else 0.0
        flops += op.fwd_flops_per_row * rows + op.fwd_flops_fixed
    out = {"rows": rows, "fwd_ms": fwd, "bwd_ms": bwd, "fwd_gflop": flops / 1e9,
           "achieved_gflops": flops / (fwd / 1e3) / 1e9 if fwd > 0 else 0.0}
    if db.groups:
        k = [g.rows.index(rows) for g in db.groups if rows in g.rows]
        if len(k) == len(db.groups):
            out["groups_fwd_ms"] = sum(g.fwd_ms[i] for g, i in zip(db.groups, k))
            out["groups_bwd_ms"] = sum(g.bwd_ms[i] for g, i in zip(db.groups, k))
    return out


def ops_summary(db: ProfileDB, graph, path: str) -> dict:
    """The --json object of `tag profile ops`: what was written and the headline figures."""
    rows = db.settings.get("rows") or sorted({r for p in db.ops.values() for r in p.rows})
    m = db.machine
    return {
        "path": path, "device_type": db.device_type, "threads": db.threads, "rows": rows,
        "ops": int(db.settings.get("ops", len(db.ops))), "signatures": len(db.ops), "groups": len(db.groups),
        "dispatch_us": (db.dispatch_ms or 0.0) * 1e3,
        "model": [model_totals(db, graph, r) for r in rows],
        "machine": m,
        "catalog": _catalog(db.device_type, m.get("peak_tflops", 0.0), m.get("memory_bandwidth_gbps", 0.0)),
        "clock": db.settings.get("clock", "wall"),
        "contention": ({**db.contention_raw, "rank_speed": db.contention.rank_speed}
                       if db.contention is not None else None),
    }


def ops_table(db: ProfileDB, graph, summary: dict) -> str:
    """Human report: the costliest signatures at the largest row count, model totals per row count, machine."""
    from tag.textfmt import table

    r = summary["rows"][-1]
    count: dict[str, int] = {}
    for op in graph.ops:
        if not op.is_weight_generator:
            sig = op_signature(op, graph)
            count[sig] = count.get(sig, 0) + 1
    top = sorted(db.ops.items(), key=lambda kv: -(interpolate(kv[1].rows, kv[1].fwd_ms, r)
                                                     + interpolate(kv[1].rows, kv[1].bwd_ms or [0.0] * len(kv[1].rows), r)))
    lines = [f"wrote {summary['path']}: {summary['signatures']} op signatures ({summary['ops']} ops), "
             f"{summary['groups']} groups, rows {summary['rows']}, device type {db.device_type}, "
             f"{db.threads} thread(s), dispatch {summary['dispatch_us']:.2f} us/op", "",
             f"costliest op signatures at {r} rows:"]
    lines.append(table([[s.split("|")[0], count.get(s, 0), interpolate(p.rows, p.fwd_ms, r),
                         interpolate(p.rows, p.bwd_ms, r) if p.bwd_ms else None, s.split("|")[1][:40]]
                        for s, p in top[:10]], ["op", "count", "fwd_ms", "bwd_ms", "inputs"]))
    lines += ["", "whole model (sum of ops; groups = measured group runs):"]
    lines.append(table([[t["rows"], t["fwd_ms"], t["bwd_ms"], t.get("groups_fwd_ms"), t.get("groups_bwd_ms"),
                         t["achieved_gflops"]] for t in summary["model"]],
                       ["rows", "fwd_ms", "bwd_ms", "group_fwd_ms", "group_bwd_ms", "fwd_gflops"]))
    lines += ["", _machine_lines(db.device_type, summary["machine"], summary["catalog"])]
    if db.cpu_quota_cores is not None:
        lines += ["", f"CPU quota: {db.cpu_quota_cores:g} cores (thread-clock times; the cost model divides them by it "
                  "below one core)"]
    c = summary.get("contention")
    if c:
        lines += ["", f"contention ({c['ranks']} ranks at once, {c['rows']} rows each; op times on the {c['clock']} "
                  f"clock): handoff {c['handoff_ms']:.3f} ms, compute stretch alone x{c['alone_stretch']:.3f} / "
                  f"together x{c['together_stretch']:.3f}, step CPU together / alone x{c['together_speed']:.3f}, "
                  f"rank step / step block x{c['rank_speed']:.3f}"]
    return "\n".join(lines)


def _machine_lines(device_type: str, m: dict, cat: dict) -> str:
    from tag.textfmt import table

    rows = [["peak_tflops (matmul)", m.get("peak_tflops"), cat.get("peak_tflops"), cat.get("peak_ratio")],
            ["memory_bandwidth_gbps (copy)", m.get("memory_bandwidth_gbps"), cat.get("memory_bandwidth_gbps"),
             cat.get("memory_bandwidth_ratio")]]
    return (f"machine {m.get('host', '?')} ({m.get('cpu', '?')}, {m.get('threads', '?')} thread(s)) vs catalog "
            f"'{device_type}':\n" + table(rows, ["figure", "measured", "catalog", "ratio"]))


def links_summary(topo: dict, path: str, compare_rows: list[dict] | None) -> dict:
    """The --json object of `tag profile links`: the written topology's shape, fits, machine vs catalog."""
    meas = topo["x-measured"]
    dtype, entry = next(iter(topo["device_types"].items()))  # the first machine's (one per type: `measured_topology`)
    out = {
        "path": path, "devices": sum(d["count"] for m in topo["machines"] for d in m["devices"]),
        "machines": len(topo["machines"]), "backend": meas["backend"], "device_type": dtype,
        "measured_device_type": entry, "machine": meas["machines"][0],
        "catalog": _catalog(dtype, entry["peak_tflops"], entry["memory_bandwidth_gbps"]),
        "p2p": meas["fits"]["p2p"], "allreduce": meas["fits"].get("allreduce"),
        "device_types": sorted(topo["device_types"]),
    }
    if compare_rows is not None:
        out["compare"] = compare_rows
        out["disagreements"] = sum(1 for r in compare_rows if r["disagrees"])
    return out


def links_table(summary: dict) -> str:
    """Human report of `tag profile links`."""
    from tag.textfmt import table

    lines = [f"wrote {summary['path']}: {summary['devices']} devices on {summary['machines']} machine(s), "
             f"{summary['backend']}", ""]
    lines.append(table([[p["kind"], f"{p['ranks'][0]}<->{p['ranks'][1]}", p["latency_us"], p["bandwidth_gbps"],
                         p["max_rel_error"]] for p in summary["p2p"]],
                       ["pair", "ranks", "latency_us", "bandwidth_gbps", "fit_max_rel_err"]))
    ar = summary.get("allreduce")
    if ar:
        lines.append(f"\nring all-reduce over {ar['ranks']} ranks: per hop {ar['hop_latency_us']:.1f} us, "
                     f"{ar['hop_bandwidth_gbps']:.2f} Gb/s (fit max rel err {ar['max_rel_error']:.2f})")
    lines += ["", _machine_lines(summary["device_type"], summary["machine"], summary["catalog"])]
    if "compare" in summary:
        lines += ["", f"compared with the hand-written topology: {summary['disagreements']} disagreement(s)"]
        lines.append(table([[r["what"], r["hand"], r["measured"], r["ratio"], "DISAGREES" if r["disagrees"] else "ok"]
                            for r in summary["compare"]], ["figure", "hand", "measured", "hand/measured", ""]))
    return "\n".join(lines)
