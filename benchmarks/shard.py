"""Issue 22, must-show 3-5: what tensor sharding buys, by the simulator, through `tag plan`.

    python benchmarks/shard.py [--playouts N] [--only 3|4|5]

3. **A huge layer on machines joined by a slow link.** ``wide_mlp`` (x[B, 2048] -> Gemm 2048 x 16384 -> Relu -> Gemm
   16384 x 16384 -> Relu -> Gemm 16384 x 2048, fp32, 336 M parameters: the middle weight alone is 1.07 GB, 4.3 GB
   with its gradient and Adam's moments) on two machines of 4 V100-16GB (NVLink-class 1,200 Gbit/s inside,
   10 Gbit/s between). ``tag plan`` against ``tag plan --no-shard``: sharding must win by >= 1.3x.
4. **Uneven ratios on a machine that mixes fast and slow devices.** The same model on one machine of 2 V100-16GB and
   2 P100-12GB (NVLink-class 1,200 Gbit/s). The planned strategy's shard shares (the linear program's) against the
   same strategy with even shares, both simulated, and the best plan without shards.
5. **bert_large and gpt2_medium on modern8 and amp16**: the best plan (``tag plan``), the best plan without shards
   (``tag plan --no-shard``) and the fastest data x tensor x pipeline strategy among the search's shard candidates
   (two or more stages, sharded groups, replicated groups), side by side.

Every plan is ``tag plan MODEL TOPO --no-gnn --playouts N`` (uniform priors, so the figures do not depend on the
shipped GNN); precision chosen by the search. Writes benchmarks/shard.md with the command and the commit.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.environ.get("TAG_BENCH_CACHE", os.path.join(tempfile.gettempdir(), "tag-bench"))  # outside the checkout
WIDE = (2048, 16384, 16384, 2048)  # wide_mlp's feature sizes
WIDE_BATCH = 128
SLOW = {"version": 1, "name": "v100x2x4-slow",
        "x-source": "benchmarks/shard.py: two machines of 4 V100-16GB, NVLink-class inside, 10 Gbit/s between",
        "machines": [{"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": 4}],
                      "intra_bandwidth_gbps": 1200, "nic_bandwidth_gbps": 10} for i in range(2)]}
MIXED = {"version": 1, "name": "v100p100-mixed",
         "x-source": "benchmarks/shard.py: one machine of 2 V100-16GB and 2 P100-12GB, NVLink-class inside",
         "machines": [{"name": "m0", "devices": [{"type": "V100-16GB", "count": 2}, {"type": "P100-12GB", "count": 2}],
                       "intra_bandwidth_gbps": 1200}]}
ZOO_CASES = [("bert_large", "modern8"), ("bert_large", "amp16"), ("gpt2_medium", "modern8"), ("gpt2_medium", "amp16")]


def wide_mlp(path: str) -> None:
    """Write wide_mlp (module docstring) to `path` (`tag.bench.wide_mlp.write_wide_mlp`)."""
    from tag.bench.wide_mlp import write_wide_mlp

    write_wide_mlp(path, WIDE)


def _cli(*argv) -> tuple[int, str]:
    from tag.cli import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(list(argv))
    return code, buf.getvalue()


def _plan(model: str, topo: str, out: str, playouts: int, *flags: str) -> dict:
    """`tag plan MODEL TOPO --no-gnn --playouts N FLAGS -o OUT --json`: the plan.json object."""
    code, text = _cli("plan", model, topo, "--no-gnn", "--playouts", str(playouts), *flags, "-o", out, "--json")
    if code not in (0, 3):
        raise SystemExit(f"tag plan exited {code}")
    return json.loads(text)


def _ms(obj: dict) -> float:
    ms = obj["predicted"]["iteration_ms"]
    return math.inf if ms is None else float(ms)


def _shards(obj: dict) -> str:
    """'heads x 20 (2 rep x 2, 0.5/0.5), column x 1 (...)' of a plan's sharded decisions; 'no shards' when none."""
    kinds: dict = {}
    for d in obj["decisions"]:
        sh = d.get("shard")
        if sh:
            reps = sh.get("replicas") or [list(sh["ratios"])]
            first = reps[0]
            key = (sh["split"], len(reps), len(first), "/".join(f"{sh['ratios'][x]:.3g}" for x in first))
            kinds[key] = kinds.get(key, 0) + 1
    if not kinds:
        return "no shards"
    return ", ".join(f"{s} x {n} ({r} rep x {k}, {sh})" for (s, r, k, sh), n in kinds.items())


def _kind(obj: dict) -> str:
    parts = []
    if obj.get("stages"):
        parts.append(f"pipeline {len(obj['stages'])} stages x m {obj['micro_batches']}")
    if any(d.get("shard") for d in obj["decisions"]):
        parts.append("shards")
    reps = max(len([r for r in d["rows"].values() if r > 0]) for d in obj["decisions"])
    parts.append(f"up to {reps} devices per group")
    return ", ".join(parts)


def _write_topology(obj: dict, d: str) -> str:
    path = os.path.join(d, obj["name"] + ".json")
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    return path


def case3(work: str, model: str, playouts: int) -> tuple[list[str], bool]:
    topo = _write_topology(SLOW, work)
    flags = ("--batch-size", str(WIDE_BATCH), "--precision", "fp32")
    with_s = _plan(model, topo, os.path.join(work, "p3.json"), playouts, *flags)
    without = _plan(model, topo, os.path.join(work, "p3n.json"), playouts, *flags, "--no-shard")
    gain = _ms(without) / _ms(with_s)
    base = min((v["iteration_ms"] for v in with_s["baselines"].values() if not v["oom"]), default=None)
    lines = ["## 3. A huge layer on two machines joined by a slow link", "",
             f"wide_mlp (features {' -> '.join(map(str, WIDE))}, batch {WIDE_BATCH}, fp32) on {SLOW['name']} "
             "(2 x 4 V100-16GB, 1,200 Gbit/s inside, 10 Gbit/s between).", "",
             "| plan | iteration ms | OOM | shards | layout |", "| --- | ---: | --- | --- | --- |",
             f"| `tag plan` | {_ms(with_s):.2f} | {with_s['predicted']['oom']} | {_shards(with_s)} | {_kind(with_s)} |",
             f"| `tag plan --no-shard` | {_ms(without):.2f} | {without['predicted']['oom']} | - | {_kind(without)} |",
             f"| best baseline that fits | {base if base is None else f'{base:.2f}'} | | | |", "",
             f"Sharding gains **{gain:.2f}x** over the best plan without it (must show >= 1.3x).", ""]
    return lines, gain >= 1.3


def case4(work: str, model: str, playouts: int) -> tuple[list[str], bool]:
    from tag.modelio import ModelOptions, load_inputs
    from tag.sim import simulate
    from tag.strategy.plancheck import validate_plan

    topo = _write_topology(MIXED, work)
    out = os.path.join(work, "p4.json")
    flags = ("--batch-size", str(WIDE_BATCH), "--precision", "fp32")
    obj = _plan(model, topo, out, playouts, *flags)
    plain = _plan(model, topo, os.path.join(work, "p4n.json"), playouts, *flags, "--no-shard")
    inp = load_inputs(model, topo, ModelOptions(batch_size=WIDE_BATCH, precision="fp32"))
    strategy, gg, _ = validate_plan(out, inp.graph, inp.gg, inp.cluster, model, topo)
    planned = simulate(gg, inp.cluster, inp.cost, strategy, inp.training)
    decisions = []
    for d in strategy.decisions:
        if d.shard is not None:
            k = d.shard.k
            d = replace(d, shard=replace(d.shard, ratios=tuple([1.0 / k] * k)))
        decisions.append(d)
    even_s = strategy.with_decisions(decisions)
    even = simulate(gg, inp.cluster, inp.cost, even_s, inp.training)
    gain = even.iteration_ms / planned.iteration_ms if planned.iteration_ms > 0 else math.nan
    shards = _shards(obj)
    lines = ["## 4. Uneven ratios on a machine mixing fast and slow devices", "",
             f"wide_mlp on {MIXED['name']} (2 V100-16GB + 2 P100-12GB in one machine, 1,200 Gbit/s inside).", "",
             "| strategy | iteration ms | OOM | shards |", "| --- | ---: | --- | --- |",
             f"| `tag plan` (LP shares) | {planned.iteration_ms:.2f} | {planned.oom} | {shards} |",
             f"| the same with even shares | {even.iteration_ms:.2f} | {even.oom} | even |",
             f"| `tag plan --no-shard` | {_ms(plain):.2f} | {plain['predicted']['oom']} | - |", "",
             f"The linear program's shares gain **{gain:.2f}x** over even ones"
             + ("" if shards != "no shards" else " (the plan has no shard: nothing to compare)") + ".", ""]
    return lines, shards != "no shards" and gain > 1.0


def best_dtp(model: str, topo: str, playouts: int) -> tuple[float, str] | None:
    """(iteration ms, name) of the fastest data x tensor x pipeline strategy among the search's shard candidates: two
    or more stages, a sharded group, a group with several replicas (data parallel), fitting memory; the search runs
    as `tag plan --no-gnn` does."""
    from tag.cli.inputs import precision_costs
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.planner import plan

    inp = load_inputs(model, topo, ModelOptions())
    res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=playouts,
               cost_for=precision_costs(argparse.Namespace(precision=None, profile=None), inp))
    best = None
    for name, (s, r) in res.shard_candidates.items():
        if s.pipeline is None or len(s.pipeline.stages) < 2 or r.oom or not math.isfinite(r.iteration_ms):
            continue
        if not any(d.shard is not None for d in s.decisions) or not any(d.replicated for d in s.decisions):
            continue
        if best is None or r.iteration_ms < best[0]:
            best = (r.iteration_ms, name)
    return best


def shardable_note(model: str, topo: str) -> str:
    """One line on which groups of `model` (grouped as `tag plan` groups it) shard and what stops the others."""
    from tag.graph.groups import group_has_params
    from tag.graph.shardable import NotShardable, analyse_group
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.shard_search import group_shards

    gg = load_inputs(model, topo, ModelOptions()).gg
    shards = group_shards(gg)
    with_params = [g.id for g in gg.groups if group_has_params(gg, g.id)]
    splits: dict = {}
    for s in shards.values():
        splits[s.split] = splits.get(s.split, 0) + 1
    stops: dict = {}
    for g in with_params:
        if g in shards:
            continue
        try:  # heads allows the most (column and row halves): its reason is what stops every split
            analyse_group(gg.graph, gg.groups[g].op_ids, "heads")
            why = "?"
        except NotShardable as e:
            why = str(e).split(": ", 1)[-1]
        parts = why.split(" ", 2)  # "<op type> <op name> <reason>" or a reason of the whole group
        key = f"a {parts[0]} that {parts[2]}" if len(parts) == 3 and parts[0][:1].isupper() else why
        stops[key] = stops.get(key, []) + [g]
    what = ", ".join(f"{n} by {k}" for k, n in splits.items())
    stop = "; ".join(f"{len(gs)}: {t} (groups {', '.join(map(str, gs[:4]))}{', ...' if len(gs) > 4 else ''})"
                     for t, gs in stops.items())
    return (f"{os.path.basename(model)[:-5]}: {len(shards)} of its {len(with_params)} groups with parameters shard "
            f"({what}); the others stop at {stop}." if stop else f"{os.path.basename(model)[:-5]}: every group with "
            f"parameters shards ({what}).")


def case5(work: str, playouts: int) -> tuple[list[str], bool]:
    lines = ["## 5. bert_large and gpt2_medium on modern8 and amp16", "",
             "| model | cluster | `tag plan` ms | precision | its layout | `--no-shard` ms | its layout | best data x "
             "tensor x pipeline ms | which |", "| --- | --- | ---: | --- | --- | ---: | --- | ---: | --- |"]
    notes, sharded = [], 0
    for m, t in ZOO_CASES:
        model = os.path.join(ROOT, "datasets", "models", m + ".onnx")
        topo = os.path.join(ROOT, "datasets", "topologies", t + ".json")
        a = _plan(model, topo, os.path.join(work, f"{m}-{t}.json"), playouts)
        b = _plan(model, topo, os.path.join(work, f"{m}-{t}-ns.json"), playouts, "--no-shard")
        dtp = best_dtp(model, topo, playouts)
        dtp_txt = ("-", "none fits") if dtp is None else (f"{dtp[0]:.1f}", f"`{dtp[1]}`")
        lines.append(f"| {m} | {t} | {_ms(a):.1f} | {a['training']['precision']} | {_kind(a)}; {_shards(a)} | "
                     f"{_ms(b):.1f} | {_kind(b)} | {dtp_txt[0]} | {dtp_txt[1]} |")
        print(lines[-1], flush=True)
        sharded += _shards(a) != "no shards"
        if t == ZOO_CASES[0][1]:
            notes.append("- " + shardable_note(model, topo))
    summary = (f"In {sharded} of {len(ZOO_CASES)} cases the best plan shards a group; elsewhere every shard candidate "
               "the search simulated (on the baselines, the fastest pipelines and the tree's best plan, then refined) "
               "was slower than the best plan without shards, so `tag plan` and `tag plan --no-shard` agree.")
    return lines + ["", summary, "", "Which groups shard (the layout analysis, `tag.graph.shardable.analyse_group`, on "
                    "the groups `tag plan` forms; gpt2_medium's attention uses one fused qkv projection, whose Slice "
                    "per chunk the analysis does not split):", ""] + notes + [""], True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--playouts", type=int, default=50)
    ap.add_argument("--only", choices=("3", "4", "5"), default=None)
    args = ap.parse_args(argv)
    t0 = time.time()
    os.makedirs(CACHE, exist_ok=True)
    work = tempfile.mkdtemp(prefix="shard-", dir=CACHE)
    model = os.path.join(work, "wide_mlp.onnx")
    wide_mlp(model)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    cmd = "python benchmarks/shard.py" + (f" --playouts {args.playouts}" if args.playouts != 50 else "") + \
        (f" --only {args.only}" if args.only else "")
    out = ["# Tensor sharding (issue 22, must-show 3-5)", "",
           f"`{cmd}` at commit {commit}" + (" (working tree with uncommitted changes of other engineers)" if dirty
                                            else "") + "; simulated figures (roofline cost model).", ""]
    ok = True
    for key, fn in (("3", lambda: case3(work, model, args.playouts)), ("4", lambda: case4(work, model, args.playouts)),
                    ("5", lambda: case5(work, args.playouts))):
        if args.only not in (None, key):
            continue
        lines, good = fn()
        ok = ok and good
        out += lines
        print("\n".join(lines), flush=True)
    out.append(f"Run time {time.time() - t0:.0f} s.")
    if args.only is None:
        with open(os.path.join(HERE, "shard.md"), "w") as f:
            f.write("\n".join(out) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
