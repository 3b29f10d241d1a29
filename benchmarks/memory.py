"""Predicted vs measured peak memory per rank on CPU ranks (issue 23, must-show 1).

Usage: python benchmarks/memory.py [--models mlp,small_cnn,small_transformer] [--batch-size 256] [--steps 3]
       [--out benchmarks/memory.md] [--work DIR] [--only-plans dp-even,...]

For each model it writes plans on a 2-rank CPU topology (`cpu2`: two `cpu` devices of one machine): the
single-device and dp-even baselines (`tag plan --baseline`), a 2-stage pipeline (groups cut in half, 1F1B over 4
micro-batches, `fidelity.pipeline_plan`), and variants of dp-even with every replicated group at ZeRO stage 1, 2
or 3, with every group recomputed, and in bf16. Each plan is predicted with the simulator's memory model
(`tag.sim.memory` via `simulate`, per device = per rank) and measured by running the `tag deploy` step
(`tag.deploy.train.train_rank`, 2 gloo ranks, one launch for all plans of a model) with
`tag.deploy.memory_probe.StepProbe` on the last step: peak live tensor bytes, from the runtime's persistent state
(weights, gradients, optimizer states, bucket buffers) plus every storage the step allocates. Step 1 creates
Adam's states, so the last step (of `--steps`, >= 2) is the steady state. Each rank's record in the work directory
(``<plan>.job.pkl.out.<rank>``) also has ``at_peak``: the live bytes per allocating ATen op at the peak, to diagnose
a miss.

The synthetic batch (`tag.deploy.data.synthetic_batch`) holds the global batch on every rank and is not counted;
instead the probe starts with this rank's rows of the data inputs copied in (as a `--data` loader holds them).

A plan the deploy runtime does not run yet (a decision it rejects) is reported as "not run" with the reason.
It prints and writes a markdown table: plan, rank, predicted MB, measured MB, error % (pred / meas - 1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
MODELS = os.path.join(HERE, "..", "datasets", "models")
CPU2 = {"version": 1, "name": "cpu2", "machines": [{"name": "local", "devices": [{"type": "cpu", "count": 2}],
                                                  "intra_bandwidth_gbps": 20}]}
VARIANTS = {"zero1": {"zero": 1}, "zero2": {"zero": 2}, "zero3": {"zero": 3}, "recompute": {"recompute": True}}


def _tag(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "tag.cli", *args, "--json"], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"tag {' '.join(args)} failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout)


def variant_plan(base: dict, **keys) -> dict:
    """A version-2 copy of plan `base` with `keys` set on every decision (zero only where the group has a sync,
    i.e. is replicated and has parameters) or, for ``precision``, on its training block."""
    plan = json.loads(json.dumps(base))
    plan["version"] = 2
    prec = keys.pop("precision", None)
    if prec is not None:
        plan.setdefault("training", {})["precision"] = prec
    for dec in plan["decisions"]:
        for k, v in keys.items():
            if k != "zero" or dec.get("sync"):
                dec[k] = v
    plan["predicted"], plan["search"] = {}, {"method": "memory-bench", **keys}
    plan.pop("baselines", None)
    return plan


def build_plans(model: str, topo: str, batch: int, work: str) -> dict[str, str]:
    """name -> plan path for one model (module docstring)."""
    from fidelity import pipeline_plan

    stem = os.path.splitext(os.path.basename(model))[0]
    plans = {}
    for base in ("single-device", "dp-even"):
        p = os.path.join(work, f"{stem}-{base}.json")
        _tag("plan", model, topo, "--baseline", base, "--batch-size", str(batch), "-o", p)
        plans[base] = p
    with open(plans["single-device"]) as f:
        single = json.load(f)
    with open(plans["dp-even"]) as f:
        dp = json.load(f)
    extra = {"pipe-1f1b-m4": pipeline_plan(single, max(1, len(single["decisions"]) // 2), ("local/0", "local/1"),
                                           "1f1b", 1, 4)}
    for name, keys in VARIANTS.items():
        extra[f"dp-even+{name}"] = variant_plan(dp, **keys)
    extra["dp-even+bf16"] = variant_plan(dp, precision="bf16")
    for name, plan in extra.items():
        p = os.path.join(work, f"{stem}-{name}.json")
        with open(p, "w") as f:
            json.dump(plan, f, indent=1)
        plans[name] = p
    return plans


def predict_bytes(model: str, topo: str, plan: str) -> list[float]:
    """Predicted peak bytes per device (topology order) of a plan (`tag.sim.simulate`)."""
    from tag.modelio import load_inputs
    from tag.sim import simulate

    inp = load_inputs(model, topo, plan_path=plan)
    r = simulate(inp.gg, inp.cluster, inp.cost, inp.strategy, inp.training)
    return [r.peak_memory_gb[d.id] * 1e9 for d in inp.cluster.devices]


def _worker(rank: int, world: int, port: int, jobs: list[tuple[str, str]], steps: int) -> None:
    """Run each (job pickle, out json) on this rank, probing the last step."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    import onnx

    from tag.deploy.job import load_job
    from tag.deploy.memory_probe import StepProbe
    from tag.deploy.onnx_torch import TorchProgram
    from tag.deploy.schedule import build_schedule
    from tag.deploy.train import train_rank

    for job_path, out in jobs:
        try:
            job = load_job(job_path)
            program = TorchProgram(onnx.load(job.model_path), job.graph, seed=job.seed)
            sched = build_schedule(job.graph, job.groups, job.strategy, job.device_machines, job.nproc,
                                   job.plan_path)
            probe = StepProbe({steps - 1}, rank_inputs=True)
            res = train_rank(sched, job.graph, program, rank, steps, job.seed, job.training.optimizer,
                             job.training.lr, step_probe=probe, **_precision_kw(job))
            rec = {"peak_bytes": probe.peaks_bytes[steps - 1], "at_peak": probe.at_peak[steps - 1],
                   "losses": res.losses}
        except Exception as e:  # noqa: BLE001 - a plan deploy cannot run is reported, the others go on
            rec = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                   "trace": traceback.format_exc()[-2000:]}
        with open(f"{out}.{rank}", "w") as f:
            json.dump(rec, f)
        dist.barrier()
    dist.destroy_process_group()
    from tag.deploy.rank_exit import exit_rank

    exit_rank()  # success: skip the C++ teardown that can abort


def _precision_kw(job) -> dict:
    """train_rank's precision argument where the deploy runtime has one (issue 23's bf16), else nothing."""
    import inspect

    from tag.deploy.train import train_rank

    if "precision" in inspect.signature(train_rank).parameters:
        return {"precision": job.training.precision}
    return {}


def measure(plans: dict[str, str], model: str, work: str, steps: int, world: int = 2) -> dict[str, list]:
    """name -> per rank {peak_bytes} or {error}: every plan in one spawn of `world` gloo ranks."""
    import socket

    import torch.multiprocessing as mp

    from tag.deploy.job import DeployOptions, prepare_job, save_job

    jobs, names = [], []
    for name, plan in plans.items():
        path = os.path.join(work, os.path.basename(plan) + ".job.pkl")
        save_job(prepare_job(plan, model, DeployOptions(steps=steps, nproc=world)), path)
        jobs.append((path, path + ".out"))
        names.append(name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(world, port, jobs, steps), nprocs=world, join=True)
    out = {}
    for name, (_, o) in zip(names, jobs):
        out[name] = []
        for r in range(world):
            with open(f"{o}.{r}") as f:
                out[name].append(json.load(f))
    return out


def table(rows: list[tuple]) -> str:
    """Markdown: model, plan, rank, predicted MB, measured MB, error % (1e6 bytes)."""
    lines = ["| model | plan | rank | predicted MB | measured MB | error % |", "| --- | --- | --- | ---: | ---: | ---: |"]
    for model, plan, rank, pred, meas in rows:
        if isinstance(meas, str):
            lines.append(f"| {model} | {plan} | {rank} | {pred / 1e6:.2f} | not run: {meas} | |")
        elif meas == 0:  # a rank with no work in the plan
            lines.append(f"| {model} | {plan} | {rank} | {pred / 1e6:.2f} | 0.00 | (idle) |")
        else:
            lines.append(f"| {model} | {plan} | {rank} | {pred / 1e6:.2f} | {meas / 1e6:.2f} | "
                         f"{100 * (pred / meas - 1):+.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,small_cnn,small_transformer")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only-plans", default="")
    ap.add_argument("--out", default=os.path.join(HERE, "memory.md"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--published", action="store_true", help="only the published maximum batch sizes table")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="tag-memory-")
    os.makedirs(work, exist_ok=True)
    if a.published:
        text = published_table(work)
        print(text)
        with open(a.out + ".published", "w") as f:
            f.write(text + "\n")
        return
    topo = os.path.join(work, "cpu2.json")
    with open(topo, "w") as f:
        json.dump(CPU2, f)
    rows = []
    for m in a.models.split(","):
        model = m if m.endswith(".onnx") else os.path.join(MODELS, f"{m}.onnx")  # a name in datasets/models, or a path
        plans = build_plans(model, topo, a.batch_size, work)
        if a.only_plans:
            plans = {k: v for k, v in plans.items() if k in a.only_plans.split(",")}
        measured = measure(plans, model, work, a.steps)
        for name, plan in plans.items():
            pred = predict_bytes(model, topo, plan)
            for r, rec in enumerate(measured[name]):
                rows.append((m, name, r, pred[r], rec.get("peak_bytes", rec.get("error"))))
                print(m, name, r, f"pred {pred[r] / 1e6:.3f} MB", f"meas {rec.get('peak_bytes', 0) / 1e6:.3f} MB"
                      if "peak_bytes" in rec else rec["error"], flush=True)
    text = table(rows)
    print(text)
    with open(a.out + ".table", "w") as f:
        f.write(text + "\n")



# ---- published maximum batch sizes --------------------------------------------------------------------------------
# (case, model key, sequence, device type, precision, optimizer, published max batch, source). Titan X (Pascal,
# 12 GB) is not in the catalog: a topology entry gives it (its memory is what matters here).
PUBLISHED = [
    ("BERT-Base fine-tuning, seq 128, Titan X 12 GB (TF 1.11, Adam)", "bert_base", 128, "TitanX-12GB", "fp32", "adam",
     32, "https://github.com/google-research/bert (README, Out-of-memory issues)"),
    ("BERT-Base fine-tuning, seq 384, Titan X 12 GB (TF 1.11, Adam)", "bert_base", 384, "TitanX-12GB", "fp32", "adam",
     12, "https://github.com/google-research/bert (README, Out-of-memory issues)"),
    ("BERT-Base fine-tuning, seq 512, Titan X 12 GB (TF 1.11, Adam)", "bert_base", 512, "TitanX-12GB", "fp32", "adam",
     6, "https://github.com/google-research/bert (README, Out-of-memory issues)"),
    ("BERT-Large fine-tuning, seq 128, Titan X 12 GB (TF 1.11, Adam)", "bert_large", 128, "TitanX-12GB", "fp32",
     "adam", 6, "https://github.com/google-research/bert (README, Out-of-memory issues)"),
    ("GPT-2 124M fine-tuning, seq 1024, V100 16 GB (pytorch_transformers, Adam): OOM above 2", "gpt2_small", 1024,
     "V100-16GB", "fp32", "adam", 2, "https://github.com/openai/gpt-2/issues/150"),
    ("ResNet-50 ImageNet, V100 16 GB, mixed precision (Apex AMP O2, DDP): largest that fits", "resnet50", 224,
     "V100-16GB", "fp16", "momentum", 208,
     "https://wiki.ncsa.illinois.edu/pages/diffpagesbyversion.action?pageId=110468653"),
]
TITAN_X = {"peak_tflops": 11.0, "memory_gb": 12, "memory_bandwidth_gbps": 3840}


def export_meta(module, seq: int, path: str) -> None:
    """Export a token model built on the meta device (input_ids [batch, seq], symbolic batch) with every float
    initializer moved to a graph input without values (FIELD-NOTES.md § ONNX, as datasets/zoo/gpt2_xl.py does)."""
    import onnx_ir
    import torch

    ids = torch.zeros((2, seq), dtype=torch.long, device="meta")
    program = torch.onnx.export(module, (ids,), dynamo=True, optimize=False, input_names=["input_ids"],
                                dynamic_shapes=({0: torch.export.Dim("batch")},))
    graph = program.model.graph
    for name in list(graph.initializers):
        value = graph.initializers.pop(name)
        value.const_value = None
        graph.inputs.append(value)
    onnx_ir.save(program.model, path)


def published_model(key: str, seq: int, work: str) -> str:
    """The ONNX file of a PUBLISHED case: the zoo's bert_large and resnet50, or a meta-device export of BERT-base
    (the zoo's Bert: 12 layers, d 768, 12 heads, d_ff 3072) or GPT-2 124M (`transformers`, via
    datasets/zoo/gpt2_xl.export_gpt2_xl with the gpt2 config) at `seq`."""
    if key in ("bert_large", "resnet50"):
        return os.path.join(MODELS, f"{key}.onnx")
    path = os.path.join(work, f"{key}_{seq}.onnx")
    if os.path.exists(path):
        return path
    if key == "gpt2_small":
        sys.path.insert(0, os.path.join(HERE, "..", "datasets", "zoo"))
        from gpt2_xl import export_gpt2_xl

        export_gpt2_xl(path, seq, {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
                                   "n_positions": 1024})
        return path
    import torch

    sys.path.insert(0, os.path.join(HERE, ".."))
    from datasets.zoo.text import Bert

    with torch.device("meta"):
        module = Bert(d_model=768, heads=12, d_ff=3072, layers=12, max_positions=512).eval()
    export_meta(module, seq, path)
    return path


def max_batch(model: str, device_type: str, precision: str, optimizer: str, work: str, limit: int = 4096) -> int:
    """The largest batch whose single-device plan fits `device_type` (`tag.sim.memory` peak <= usable memory),
    0 if none: the model is read once, the peak is evaluated per batch (per-row figures scale) and bisected."""
    import numpy as np

    from tag.modelio import ModelOptions, load_inputs
    from tag.sim.context import sim_context
    from tag.sim.memory import peak_memory_bytes
    from tag.strategy import Decision

    topo = os.path.join(work, f"one-{device_type}.json")
    obj = {"version": 1, "name": "one", "machines": [{"name": "m0", "devices": [{"type": device_type, "count": 1}]}]}
    if device_type == "TitanX-12GB":
        obj["device_types"] = {device_type: TITAN_X}
    with open(topo, "w") as f:
        json.dump(obj, f)
    inp = load_inputs(model, topo, ModelOptions(batch_size=8, optimizer=optimizer, precision=precision))
    ctx = sim_context(inp.gg, inp.cluster, inp.cost, inp.training)
    usable = inp.cluster.devices[0].type.usable_memory_bytes

    def fits(b: int) -> bool:
        decs = [Decision((b,)) for _ in inp.gg.groups]
        return peak_memory_bytes(ctx, decs, [], optimizer, np.zeros(1), precision)[0] <= usable

    lo, hi = 0, 1
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def published_table(work: str) -> str:
    """Markdown: case, published max batch, tag's predicted max batch, source."""
    lines = ["| case | published max batch | tag's predicted max batch | source |", "| --- | ---: | ---: | --- |"]
    for case, key, seq, dtype, prec, opt, published, url in PUBLISHED:
        model = published_model(key, seq, work)
        pred = max_batch(model, dtype, prec, opt, work)
        print(case, published, pred, flush=True)
        lines.append(f"| {case} | {published} | {pred} | {url} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
