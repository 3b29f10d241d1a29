"""Plan budget benchmark: `tag plan` at default settings on every datasets model x topology.

Run:  python benchmarks/plan_budget.py [--models M ...] [--topologies T ...] [--jobs J] [--markdown]
      [-- EXTRA tag plan FLAGS]

Each case runs `python -m tag.cli plan MODEL TOPOLOGY --json -o TMP` in its own process (so each pays its own
start-up, as a user does) and reads the written plan. Per case it prints the wall seconds and the CPU seconds
(user + system, from wait4: what the case costs on an idle machine, whatever else loads it) of the whole
command, the plan's `search.seconds`, `search.playouts`, `search.simulations`, `search.capped`, whether the
plan fits in memory, and quality = plan iteration_ms / dp-proportional iteration_ms (below 1: the plan is
faster than the dp-proportional baseline; `-` when dp-proportional runs out of memory). Plans written by
older versions lack simulations / capped; they print as `-`.

--jobs J runs J cases at once (the machine's load then slows each case; seconds are per case).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADERS = ["model", "topology", "wall s", "cpu s", "search s", "playouts", "simulations", "capped", "fits", "plan/dp-prop"]


def _names(folder: str, ext: str) -> list[str]:
    return sorted(f[: -len(ext)] for f in os.listdir(os.path.join(ROOT, "datasets", folder)) if f.endswith(ext))


def run_case(model: str, topology: str, extra: list[str], python: str = sys.executable) -> dict:
    """One `tag plan` at defaults (plus `extra` flags); returns the row as a dict."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        cmd = [python, "-m", "tag.cli", "plan", os.path.join(ROOT, "datasets", "models", f"{model}.onnx"),
               os.path.join(ROOT, "datasets", "topologies", f"{topology}.json"), "--json", "-o", out, *extra]
        err_path = os.path.join(tmp, "stderr.txt")
        t0 = time.monotonic()
        with open(err_path, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall_s = time.monotonic() - t0
        row = {"model": model, "topology": topology, "wall_s": wall_s, "cpu_s": usage.ru_utime + usage.ru_stime,
               "exit": proc.returncode}
        try:
            with open(out) as f:
                obj = json.load(f)
        except (OSError, ValueError):
            with open(err_path) as f:
                row["error"] = (f.read().strip().splitlines() or ["no plan written"])[-1]
            return row
    search, pred = obj.get("search", {}), obj["predicted"]
    dp = obj.get("baselines", {}).get("dp-proportional", {})
    ratio = None
    if not dp.get("oom", True) and not pred["oom"]:
        ratio = pred["iteration_ms"] / dp["iteration_ms"]
    row.update(search_s=search.get("seconds"), playouts=search.get("playouts"), simulations=search.get("simulations"),
               capped=search.get("capped"), fits=not pred["oom"], ratio=ratio, iteration_ms=pred["iteration_ms"],
               method=search.get("method"), warnings=search.get("warnings"))
    return row


def _cells(r: dict) -> list:
    if "error" in r:
        return [r["model"], r["topology"], round(r["wall_s"], 1), round(r["cpu_s"], 1), "error: " + r["error"][:60],
                None, None, None, None, None]
    ratio = None if r["ratio"] is None else f"{r['ratio']:.4f}"
    return [r["model"], r["topology"], round(r["wall_s"], 1), round(r["cpu_s"], 1), r["search_s"], r["playouts"], r["simulations"],
            r["capped"], r["fits"], ratio]


def markdown(rows: list[dict]) -> str:
    fmt = lambda c: "-" if c is None else ("yes" if c is True else "no" if c is False else str(c))  # noqa: E731
    out = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(fmt(c) for c in _cells(r)) + " |" for r in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=None, help="model names (default: every datasets/models/*.onnx)")
    ap.add_argument("--topologies", nargs="*", default=None, help="topology names (default: every datasets/topologies/*.json)")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table (default: plain text)")
    ap.add_argument("--json-out", default=None, metavar="F", help="also write the rows as JSON here")
    ap.add_argument("extra", nargs="*", help="extra `tag plan` flags, after --")
    a = ap.parse_args(argv)
    models = a.models or _names("models", ".onnx")
    topos = a.topologies or _names("topologies", ".json")
    cases = [(m, t) for m in models for t in topos]
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = [pool.submit(run_case, m, t, a.extra) for m, t in cases]
        rows = []
        for f in futures:
            rows.append(f.result())
            print(" ".join(str(c) for c in _cells(rows[-1])), file=sys.stderr, flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    if a.markdown:
        print(markdown(rows))
    else:
        from tag.textfmt import table
        print(table([_cells(r) for r in rows], HEADERS))
    ok = [r for r in rows if "error" not in r]
    if ok:
        slow = max(ok, key=lambda r: r["cpu_s"])
        print(f"\nslowest: {slow['model']} x {slow['topology']} {slow['cpu_s']:.1f} s CPU ({slow['wall_s']:.1f} s wall); "
              f"capped: {sum(1 for r in ok if r['capped'])} of {len(ok)}; errors: {len(rows) - len(ok)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
