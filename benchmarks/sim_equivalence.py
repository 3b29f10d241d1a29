"""Simulator equivalence: every baseline on every datasets model x topology, recorded and compared.

Run:
    python benchmarks/sim_equivalence.py --record before.json [--models a,b] [--topologies x,y]
    python benchmarks/sim_equivalence.py --compare before.json [--models a,b] [--topologies x,y] [--md out.md]

For every model in datasets/models/*.onnx and every topology in datasets/topologies/*.json, the inputs are loaded
as `tag simulate` loads them (`tag.modelio.load_inputs`, default flags: roofline cost model, automatic groups, the
file's batch), and for every baseline of `tag.search.baselines.BASELINES` this records, for `simulate()` in the
two modes the code uses ("async": the defaults, as the search scores strategies; "deploy": ``overlap_sync=False,
blocking_sends=True`` as `tag deploy` and the fidelity rig model the runtime): iteration_ms, fit_iteration_ms,
peak memory per device (1e9 bytes) and bytes per directed link; plus the critical-path `estimate()` of the
strategy (all five fields, ms). A model that cannot be loaded or a baseline that cannot be built is recorded
as an error string (and compared as such); an OOM iteration is recorded as "inf".

Since plan.json version 2 the baselines sync in 25 MiB buckets with each bucket's collective chosen by cost; the
recording (`sim_equivalence_before.json`, made before that) holds their version-1 forms, so each baseline is
simulated as `version_1_form` gives it: one bucket per group and the version-1 sync choices.

`--compare` recomputes the same cases, prints a table of iteration_ms per model x topology x baseline (both
modes) with the largest absolute and relative difference over every recorded figure of that row, and exits 1 if
any figure differs by more than 1e-9 relative (|a - b| > 1e-9 x max(|a|, |b|), with equal infinities equal), if
an error changed, or if a case is missing on either side; 0 otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL_TOL = 1e-9
MODES = {"async": {}, "deploy": {"overlap_sync": False, "blocking_sends": True}}


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _num(x: float):
    """A float as JSON: finite values as is, infinities and NaN as strings."""
    return x if math.isfinite(x) else str(x)


def _load(model: str, topology: str):
    """The inputs `tag simulate MODEL TOPOLOGY --baseline ...` loads with default flags."""
    import inspect

    from tag import modelio

    params = list(inspect.signature(modelio.load_inputs).parameters.values())
    if params[2].default is inspect.Parameter.empty:  # before issue 19: an argparse Namespace of flags
        return modelio.load_inputs(model, topology, argparse.Namespace())
    return modelio.load_inputs(model, topology)  # typed options, at their defaults


def version_1_form(baseline: str, st, gg, cluster, cost, training):
    """The baseline as version 1 built it: one bucket per group; dp-even and the single-device baselines by ring
    all-reduce; dp-proportional by ring, or on several machines by version 1's hierarchical (now `leader`) when that
    simulated strictly faster (or fit where the ring did not); ps unchanged."""
    from tag.sim import simulate
    from tag.strategy import Decision, Strategy

    def with_sync(sync):
        return Strategy(tuple(Decision(d.rows, sync if d.sync in ("auto", "ring") else d.sync, d.server, d.sfb)
                              for d in st.decisions), 0.0)

    flat = with_sync("ring")
    if baseline != "dp-proportional" or len({d.machine for d in cluster.devices}) <= 1:
        return flat
    hier = with_sync("leader")
    a, b = simulate(gg, cluster, cost, hier, training), simulate(gg, cluster, cost, flat, training)
    better = (not a.oom) if a.oom != b.oom else a.iteration_ms < b.iteration_ms
    return hier if better else flat


def case_figures(inp, baseline: str) -> dict:
    """Everything recorded for one (inputs, baseline): per mode the SimResult figures, and the estimate."""
    from tag.gnn.estimate import estimate
    from tag.search.baselines import build_baseline
    from tag.sim import simulate

    st = version_1_form(baseline, build_baseline(baseline, inp.gg, inp.cluster, inp.cost, inp.training), inp.gg,
                        inp.cluster, inp.cost, inp.training)
    out: dict = {}
    for mode, kw in MODES.items():
        r = simulate(inp.gg, inp.cluster, inp.cost, st, inp.training, **kw)
        out[mode] = {"iteration_ms": _num(r.iteration_ms), "fit_ms": _num(r.fit_iteration_ms),
                     "peak_memory_gb": {k: _num(v) for k, v in r.peak_memory_gb.items()},
                     "link_bytes": {k: _num(v) for k, v in r.link_bytes.items()}}
    e = estimate(inp.gg, inp.cluster, inp.cost, st, inp.training)
    out["estimate"] = {k: _num(getattr(e, k)) for k in
                       ("iteration_ms", "busiest_compute_ms", "backward_end_ms", "sync_busy_ms", "transfer_busy_ms")}
    return out


def run_grid(models: list[str], topologies: list[str], log=sys.stderr) -> dict:
    """{"model|topology|baseline": figures or {"error": message}} over the grid (a load error fills every
    baseline of that model x topology)."""
    from tag.search.baselines import BASELINES

    cases: dict = {}
    for t in topologies:
        for m in models:
            t0 = time.perf_counter()
            try:
                inp = _load(m, t)
                load_err = None
            except Exception as exc:  # noqa: BLE001 - recorded and compared, never skipped
                inp, load_err = None, f"load: {type(exc).__name__}: {exc}"
            for b in BASELINES:
                key = f"{_stem(m)}|{_stem(t)}|{b}"
                if load_err is not None:
                    cases[key] = {"error": load_err}
                    continue
                try:
                    cases[key] = case_figures(inp, b)
                except Exception as exc:  # noqa: BLE001
                    cases[key] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{_stem(m):<18} {_stem(t):<10} {time.perf_counter() - t0:7.1f} s", file=log, flush=True)
    return cases


def _flat(obj, prefix=""):
    """(path, leaf) pairs of nested dicts."""
    if isinstance(obj, dict):
        for k in sorted(obj):
            yield from _flat(obj[k], f"{prefix}/{k}" if prefix else k)
    else:
        yield prefix, obj


def _as_float(x) -> float | None:
    if isinstance(x, (int, float)):
        return float(x)
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def diff(a, b) -> tuple[float, float, list[str]]:
    """(max abs difference, max relative difference, problems) between two recorded cases."""
    fa, fb = dict(_flat(a)), dict(_flat(b))
    problems = [f"{p}: only before" for p in fa.keys() - fb.keys()] + [f"{p}: only after" for p in fb.keys() - fa.keys()]
    mabs = mrel = 0.0
    for p in sorted(fa.keys() & fb.keys()):
        x, y = _as_float(fa[p]), _as_float(fb[p])
        if x is None or y is None:
            if fa[p] != fb[p]:
                problems.append(f"{p}: {fa[p]!r} -> {fb[p]!r}")
            continue
        if x == y:
            continue
        d = abs(x - y) if math.isfinite(x) and math.isfinite(y) else math.inf
        r = d / max(abs(x), abs(y))
        mabs, mrel = max(mabs, d), max(mrel, r)
        if r > REL_TOL:
            problems.append(f"{p}: {x!r} -> {y!r}")
    return mabs, mrel, problems


def _fmt(case: dict | None, mode: str) -> str:
    if case is None:
        return "missing"
    if "error" in case:
        return "error"
    v = case[mode]["iteration_ms"]
    return "OOM" if v == "inf" else f"{v:.6f}"


def compare(before: dict, after: dict) -> tuple[list[str], int, float, float]:
    """(table lines, rows that differ, max abs, max rel) of a before/after comparison."""
    lines = ["| model | topology | baseline | async before | async after | deploy before | deploy after | max abs | max rel | ok |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    bad, gabs, grel = 0, 0.0, 0.0
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            mabs, mrel, problems = math.inf, math.inf, ["missing on one side"]
        elif ("error" in a) != ("error" in b):
            mabs, mrel, problems = math.inf, math.inf, [f"error: {a.get('error')!r} -> {b.get('error')!r}"]
        else:
            mabs, mrel, problems = diff(a, b)
        gabs, grel = max(gabs, mabs), max(grel, mrel)
        bad += bool(problems)
        m, t, bl = key.split("|")
        lines.append(f"| {m} | {t} | {bl} | {_fmt(a, 'async')} | {_fmt(b, 'async')} | {_fmt(a, 'deploy')} | "
                     f"{_fmt(b, 'deploy')} | {mabs:.3g} | {mrel:.3g} | {'yes' if not problems else 'NO: ' + '; '.join(problems[:3])} |")
    return lines, bad, gabs, grel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--record", metavar="FILE.json", help="write the figures of the grid to FILE.json")
    which.add_argument("--compare", metavar="FILE.json", help="recompute the grid and compare it with FILE.json")
    ap.add_argument("--models", default="", help="comma-separated model stems (default: all)")
    ap.add_argument("--topologies", default="", help="comma-separated topology stems (default: all)")
    ap.add_argument("--md", metavar="OUT.md", default=None, help="with --compare: also write the table as markdown")
    args = ap.parse_args(argv)
    models = sorted(glob.glob(os.path.join(ROOT, "datasets/models/*.onnx")))
    topos = sorted(glob.glob(os.path.join(ROOT, "datasets/topologies/*.json")))
    if args.models:
        models = [m for m in models if _stem(m) in args.models.split(",")]
    if args.topologies:
        topos = [t for t in topos if _stem(t) in args.topologies.split(",")]
    t0 = time.perf_counter()
    cases = run_grid(models, topos)
    secs = time.perf_counter() - t0
    if args.record:
        with open(args.record, "w") as f:
            json.dump({"models": [_stem(m) for m in models], "topologies": [_stem(t) for t in topos],
                       "cases": cases}, f, indent=0, sort_keys=True)
        print(f"recorded {len(cases)} cases in {secs:.0f} s to {args.record}")
        return 0
    with open(args.compare) as f:
        before = json.load(f)["cases"]
    keep = {f"{_stem(m)}|{_stem(t)}|" for m in models for t in topos}
    before = {k: v for k, v in before.items() if k[: k.rindex("|") + 1] in keep}
    lines, bad, mabs, mrel = compare(before, cases)
    print("\n".join(lines))
    summary = (f"{len(cases)} cases ({len(models)} models x {len(topos)} topologies x baselines), "
               f"{bad} differ by more than {REL_TOL:g} relative; max abs difference {mabs:.3g}, max rel {mrel:.3g}; "
               f"{secs:.0f} s")
    print(summary)
    if args.md:
        with open(args.md, "w") as f:
            f.write(summary + "\n\n" + "\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
