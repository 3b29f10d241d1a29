"""Measured vs predicted step time of `tag deploy` for a few plans on this machine (4 local cpu ranks).

Usage: python benchmarks/deploy_bench.py [--steps N] [--models mlp,gpt2_tiny] [--baselines dp-even,m-topo,plan]
                                        [--nproc N] [--profile] [--topology T.json]

Writes a 4-device cpu topology (two machines of two `cpu` devices) and one plan per (model, baseline) with
`tag plan --baseline`, deploys each with `tag deploy --json`, and prints one row per plan: the plan's
predicted iteration time, the measured step time (median after one warm-up step) and the first and last
loss. Expect the measured time above the prediction on an oversubscribed machine: the `cpu` catalog
figures are nominal, and torch start-up and gloo round trips are not in the model. `--nproc N` deploys on N ranks
(ranks then host several plan devices); `--profile` first runs `tag profile ops` on each model and plans with it,
so the prediction is the product's (`measured / predicted` is the last column).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "datasets", "models")
TOPO = {"version": 1, "name": "cpu4", "machines": [
    {"name": "m0", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10},
    {"name": "m1", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10}]}


def _tag(*args) -> dict:
    p = subprocess.run([sys.executable, "-m", "tag.cli", *args, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"tag {' '.join(args)} failed: {p.stderr.strip()}")
    return json.loads(p.stdout)


def topology_file(work_dir: str, given: str | None, default: dict) -> str:
    """`given`, or `default` written as work_dir/<its name>.json."""
    if given:
        return given
    path = os.path.join(work_dir, f"{default['name']}.json")
    with open(path, "w") as f:
        json.dump(default, f)
    return path


def model_path(model: str) -> str:
    """A path ending in .onnx as given, else datasets/models/MODEL.onnx."""
    return model if model.endswith(".onnx") else os.path.join(MODELS, f"{model}.onnx")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--models", default="mlp,gpt2_tiny")
    ap.add_argument("--baselines", default="dp-even,single-device,m-topo",
                    help="baselines to plan with `tag plan --baseline`; `plan` is tag plan's own search")
    ap.add_argument("--nproc", type=int, default=None, help="local ranks (default: one per plan device)")
    ap.add_argument("--profile", action="store_true", help="plan with a `tag profile ops` profile of each model")
    ap.add_argument("--topology", default=None, help="a topology.json to plan on (default: the 4-device one above)")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        topo = topology_file(d, a.topology, TOPO)
        for model in a.models.split(","):
            path = model_path(model)
            prof = []
            if a.profile:
                prof = ["--profile", os.path.join(d, f"{os.path.basename(model)}-profile.json")]
                _tag("profile", "ops", path, "-o", prof[1])
            for base in a.baselines.split(","):
                plan = os.path.join(d, f"{os.path.basename(model)}-{base}.json")
                how = [] if base == "plan" else ["--baseline", base]  # "plan": tag plan's own search
                _tag("plan", path, topo, *how, "--batch-size", str(a.batch_size), "-o", plan, *prof)
                out = _tag("deploy", plan, path, "--steps", str(a.steps),
                           *(["--nproc", str(a.nproc)] if a.nproc else []))
                with open(plan) as f:
                    method = json.load(f)["search"]["method"]
                rows.append((model, base, out["predicted_step_ms"], out["measured_step_ms"],
                             out["losses"][0], out["losses"][-1], method))
                print(f"  done {model} {base}", file=sys.stderr)
    head = ("model", "plan", "predicted_ms", "measured_ms", "loss_first", "loss_last", "measured/pred", "method")
    print("  ".join(f"{h:>14}" for h in head))
    for r in rows:
        print(f"{os.path.basename(r[0]):>14}  {r[1]:>14}  {r[2]:>14.2f}  {r[3]:>14.2f}  {r[4]:>14.4f}  {r[5]:>14.4f}  "
              f"{r[3] / r[2]:>14.2f}  {r[6]}")


if __name__ == "__main__":
    main()
