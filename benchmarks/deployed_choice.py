"""`tag plan`'s as-deployed choice on this machine: the searched plan against the plan it writes, both deployed.

Usage: python benchmarks/deployed_choice.py [--models mlp,gpt2_tiny,...] [--topology T.json] [--rounds R]
                                            [--steps N] [--batch-size B]

For each model: `tag profile ops` once; `tag plan --no-as-deployed` (the search's plan, scored by the simulator)
and `tag plan` (the finalist `tag deploy` predicts fastest on the topology's ranks,
`tag.cli._plan_deployed`) with that profile; when they differ, both are deployed R times in alternation
(`tag deploy --steps N`, one rank per plan device) and the table prints the median of the R measured steps of
each, their ratio (searched / chosen: above 1 means the choice runs faster) and the as-deployed predictions
plan.json recorded. Keep the topology's devices at or below this machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from deploy_bench import _tag, model_path, topology_file  # this directory is on the path when a script here runs

TOPO2 = {"version": 1, "name": "cpu2", "machines": [  # two machines of one device: 2 ranks on 2 cores
    {"name": m, "devices": [{"type": "cpu", "count": 1}], "nic_bandwidth_gbps": 10} for m in ("m0", "m1")]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,gpt2_tiny,small_transformer,bert_tiny,dlrm_tiny,small_cnn")
    ap.add_argument("--topology", default=None, help="topology.json (default: two machines of one cpu device)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=32)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        topo = topology_file(d, a.topology, TOPO2)
        for model in a.models.split(","):
            path = model_path(model)
            name = os.path.basename(path)[:-5]
            prof = os.path.join(d, f"{name}-profile.json")
            _tag("profile", "ops", path, "-o", prof)
            plans = {}
            for kind, flags in (("searched", ["--no-as-deployed"]), ("chosen", [])):
                plans[kind] = os.path.join(d, f"{name}-{kind}.json")
                _tag("plan", path, topo, "--profile", prof, "--batch-size", str(a.batch_size), "-o", plans[kind],
                     *flags)
            with open(plans["chosen"]) as f:
                chosen = json.load(f)
            dep = chosen["search"].get("as_deployed") or {}
            pick = dep.get("chosen", "plan")
            measured = {"searched": [], "chosen": []}
            if pick != "plan":
                for _ in range(a.rounds):
                    for kind in ("searched", "chosen"):
                        out = _tag("deploy", plans[kind], path, "--steps", str(a.steps))
                        measured[kind].append(out["measured_step_ms"])
            steps = dep.get("step_ms", {})
            rows.append((name, pick, steps.get("plan"), steps.get(pick),
                         statistics.median(measured["searched"]) if measured["searched"] else None,
                         statistics.median(measured["chosen"]) if measured["chosen"] else None))
            print(f"  done {name}: {pick}", file=sys.stderr)
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    print("| model | chosen | predicted as deployed: searched / chosen ms | measured: searched / chosen ms "
          "(median of rounds) | searched / chosen |")
    print("|---|---|---|---|---|")
    for name, pick, p_s, p_c, m_s, m_c in rows:
        ratio = "-" if m_s is None or m_c is None else f"{m_s / m_c:.2f}"
        print(f"| {name} | {pick} | {fmt(p_s)} / {fmt(p_c)} | {fmt(m_s)} / {fmt(m_c)} | {ratio} |")


if __name__ == "__main__":
    main()
