"""Benchmark `tag inspect` on big graphs: wall time and peak RSS of the whole command (a fresh process each).

Cases: the largest light-zoo model (most nodes), GPT-2 medium (350 M parameters as graph inputs, built by
``python datasets/build.py gpt2_medium`` on the meta device if it is not there yet), and BERT-large.
Goal: under 10 s and 2 GB each.

    python benchmarks/inspect_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL_S, GOAL_GB = 10.0, 2.0


def light_models() -> list[str]:
    import onnx

    return sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_*.onnx")))


def largest_light() -> str:
    """The light-zoo model with the most nodes."""
    import onnx

    return max(light_models(), key=lambda p: len(onnx.load(p, load_external_data=False).graph.node))


def gpt2_medium() -> str:
    path = os.path.join(ROOT, "datasets/models/gpt2_medium.onnx")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "datasets/build.py"), "gpt2_medium"], check=True, cwd=ROOT)
    return path


def run_inspect(path: str) -> tuple[float, float, dict]:
    """(wall seconds, peak RSS in 10^9 bytes, --json summary) of one `tag inspect PATH --json` process."""
    cmd = [sys.executable, "-m", "tag.cli", "inspect", path, "--json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"tag inspect {path} failed: {err.decode().strip()}")
    return seconds, usage.ru_maxrss * 1024 / 1e9, json.loads(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1, help="runs per case; the best time is reported")
    args = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    from tag.textfmt import table

    cases = [("largest light zoo", largest_light()), ("gpt2_medium (weights as inputs)", gpt2_medium()),
             ("bert_large", os.path.join(ROOT, "datasets/models/bert_large.onnx"))]
    rows = []
    for label, path in cases:
        if not os.path.exists(path):
            continue
        runs = [run_inspect(path) for _ in range(max(args.repeat, 1))]
        seconds = min(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        s = runs[0][2]
        rows.append([label, os.path.basename(path), s["ops"], s["params"] / 1e6, s["forward_flops_per_sample"] / 1e9,
                     s["unknown_shapes"], seconds, rss, seconds < GOAL_S and rss < GOAL_GB])
    print(table(rows, ["case", "file", "ops", "params M", "fwd GFLOP/sample", "unknown", "seconds", "peak GB", "goal met"]))
    print(f"goal: under {GOAL_S:.0f} s and {GOAL_GB:.0f} GB per command (process start and imports included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
