"""Issue 23, must-show 3: a 1.5 B-parameter GPT-2 on 16 GPUs of 16 GB, planned without pipelines, fits only by ZeRO or
recomputation.

    python benchmarks/zero_gpt2.py [--seq 512] [--batch 16] [--playouts N] [--simulations N]

1. exports GPT-2 XL (48 layers, d 1600, 25 heads, vocab 50257; `datasets/zoo/gpt2_xl.py`: transformers on the meta
   device, optimize=False, use_cache=False) at sequence `--seq` into $TAG_BENCH_CACHE (default /tmp/tag-bench)
   unless it is there;
2. writes the cluster: two machines of 8 V100-16GB (NVLink-class 1,200 Gbit/s inside, 100 Gbit/s NICs);
3. simulates the fp32 data-parallel baselines with ZeRO 0 (dp-even, dp-proportional): out of memory;
4. runs ``tag plan MODEL TOPO --no-shard --no-pipeline --precision fp32 --no-gnn -o plan.json`` and ``tag simulate
   --plan``, and prints the plan's memory and time per device
   and its ZeRO stages and recomputed groups.

Writes benchmarks/zero_gpt2.md with the command and the commit.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.environ.get("TAG_BENCH_CACHE", os.path.join(tempfile.gettempdir(), "tag-bench"))  # outside the checkout
TOPOLOGY = {"version": 1, "name": "v100x16",
            "x-source": "benchmarks/zero_gpt2.py: two DGX-1-like machines of 8 V100-16GB",
            "machines": [{"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": 8}],
                          "intra_bandwidth_gbps": 1200, "nic_bandwidth_gbps": 100} for i in range(2)]}


def _cli(*argv) -> tuple[int, str]:
    from tag.cli import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(list(argv))
    return code, buf.getvalue()


def _dp_zero0(model: str, topo: str, batch: int) -> dict:
    """name -> SimResult of the fp32 ZeRO-0 data-parallel baselines."""
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.baselines import build_baseline
    from tag.sim import simulate

    inp = load_inputs(model, topo, ModelOptions(batch_size=batch, precision="fp32"))
    out = {}
    for name in ("dp-even", "dp-proportional"):
        s = build_baseline(name, inp.gg, inp.cluster, inp.cost, inp.training)
        assert all(d.zero == 0 and not d.recompute for d in s.decisions)
        out[name] = simulate(inp.gg, inp.cluster, inp.cost, s, inp.training)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=16, help="global batch (default 16: one sequence per GPU)")
    p.add_argument("--playouts", type=int, default=None)
    p.add_argument("--simulations", type=int, default=None)
    p.add_argument("--out", default=os.path.join(HERE, "zero_gpt2.md"))
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "datasets", "zoo"))
    from gpt2_xl import GPT2_XL, export_gpt2_xl, gpt2_params

    os.makedirs(CACHE, exist_ok=True)
    model = os.path.join(CACHE, f"gpt2_xl_seq{args.seq}.onnx")
    if not os.path.exists(model):
        n, s = export_gpt2_xl(model, args.seq)
        print(f"exported {model}: {n:,} parameters in {s:.1f} s", file=sys.stderr)
    topo = os.path.join(CACHE, "v100x16.json")
    with open(topo, "w") as f:
        json.dump(TOPOLOGY, f, indent=1)
    usable_gb = 0.92 * 16
    dp = _dp_zero0(model, topo, args.batch)

    plan_path = os.path.join(CACHE, "zero_gpt2_plan.json")
    cmd = ["plan", model, topo, "--no-shard", "--no-pipeline", "--precision", "fp32", "--no-gnn", "--batch-size",
           str(args.batch), "-o", plan_path]
    cmd += ["--playouts", str(args.playouts)] if args.playouts is not None else []
    cmd += ["--simulations", str(args.simulations)] if args.simulations is not None else []
    t0 = time.monotonic()
    code, text = _cli(*cmd)
    plan_s = time.monotonic() - t0
    if code not in (0, 3):
        print(f"tag plan exited {code}", file=sys.stderr)
        return 1
    with open(plan_path) as f:
        plan = json.load(f)
    _, sim_text = _cli("simulate", model, topo, "--plan", plan_path, "--json")
    sim = json.loads(sim_text)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    rel = lambda x: os.path.basename(x)  # noqa: E731  (files in the cache directory)
    command = " ".join(["python", "benchmarks/zero_gpt2.py"] + (argv if argv is not None else sys.argv[1:]))
    mem = plan["search"]["memory"]
    zero = ", ".join(f"ZeRO-{z} on {n} groups" for z, n in mem["zero"].items()) or "no ZeRO"
    lines = [
        "# GPT-2 XL (1.5 B) on 16 x V100-16GB: only ZeRO or recomputation makes it fit (issue 23, must-show 3)", "",
        f"Generated by `{command}` at commit {commit}. Model: GPT-2 XL ({gpt2_params(**GPT2_XL):,} parameters; "
        f"48 layers, d 1600, 25 heads, vocab 50257), exported from `transformers` on the meta device at sequence "
        f"{args.seq} (`datasets/zoo/gpt2_xl.py`), global batch {args.batch}, Adam, fp32. Cluster: two machines of "
        "8 V100-16GB (14.72 GB usable each), 1,200 Gbit/s inside a machine, 100 Gbit/s NICs. Plan: "
        f"`tag {' '.join(rel(c) if os.path.isabs(c) else c for c in cmd)}` ({plan_s:.0f} s, "
        f"{plan['search']['simulations']} simulations); tensor shards and pipelines are off.", "",
        "## fp32 data parallelism with ZeRO 0 does not fit", "",
        "| baseline | peak GB per device (worst) | usable GB | fits | iteration ms if it fit |", "|---|---|---|---|---|"]
    for name, r in dp.items():
        lines.append(f"| {name} | {max(r.peak_memory_gb.values()):.2f} | {usable_gb:.2f} | "
                     f"{'no' if r.oom else 'yes'} | {r.fit_iteration_ms:.1f} |")
    lines += ["", f"## the plan: {zero}, {mem['recompute']} recomputed groups, "
                  f"{'fits' if not sim['oom'] else 'DOES NOT FIT'}", "",
              f"Iteration {sim['iteration_ms']:.1f} ms, {sim['samples_per_s']:.2f} samples/s "
              f"(search: {plan['search']['method']}; memory variants of the baselines: "
              + (", ".join(f"{n} {v['iteration_ms']:.1f} ms" for n, v in mem["variants"].items()) or "none") + ").",
              "", "| device | peak GB | usable GB | busy ms |", "|---|---|---|---|"]
    for dev, gb in sim["peak_memory_gb"].items():
        lines.append(f"| {dev} | {gb:.2f} | {usable_gb:.2f} | {sim['busy_ms'].get(dev, 0.0):.1f} |")
    lines += ["", "The plan's decisions (runs of equal decisions) as `tag plan` prints them:", "", "```",
              text.strip(), "```", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if not sim["oom"] and all(r.oom for r in dp.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
