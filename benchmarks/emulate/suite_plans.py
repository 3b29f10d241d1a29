"""The fidelity benchmark's plans besides the baselines and searched ones: random valid strategies, ZeRO 1-3 and
column-sharded variants, and 2-stage pipelines (`benchmarks/fidelity.py` writes them next to the `tag plan`
ones; each is a copy of a plan `tag plan` wrote, so it records the same profile)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys


def _tag(*args: str, timeout: float = 900) -> dict:
    p = subprocess.run([sys.executable, "-m", "tag.cli", *args, "--json"], capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"tag {' '.join(args)} failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout)


def random_plan(base: dict, n_dev: int, rng: random.Random) -> dict:
    """A random valid plan from a dp-even plan `base`: per group a random device subset and row split.

    Groups that dp-even keeps whole on one device (not splittable by rows) go whole to a random device;
    replicated groups with parameters (dp-even gave them a sync) sync by allreduce or ps (random server); a
    version-1 plan, so its gradient buckets are derived from these row maps.
    """
    plan = json.loads(json.dumps(base))
    devices = list(max((dec["rows"] for dec in base["decisions"]), key=len))  # topology order
    batch = plan["model"]["batch_size"]
    for dec in plan["decisions"]:
        splittable = sum(1 for v in dec["rows"].values() if v > 0) > 1
        has_params = dec["sync"] is not None
        k = rng.randint(1, len(devices)) if splittable else 1
        chosen = sorted(rng.sample(range(len(devices)), k))
        cuts = sorted(rng.sample(range(1, batch), k - 1))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [batch])]
        dec["rows"] = {devices[i]: s for i, s in zip(chosen, sizes)}
        dec["sfb"] = []
        if k > 1 and has_params:
            dec["sync"] = rng.choice(["allreduce", "ps"])
            dec["server"] = devices[rng.choice(chosen)] if dec["sync"] == "ps" else None
        else:
            dec["sync"], dec["server"] = None, None
    plan["version"] = 1  # its buckets derived from the new row maps (version 2 lists them; the base's no longer fit)
    plan.pop("buckets", None)
    plan.pop("bucket_mb", None)
    plan["predicted"] = {}
    plan.pop("baselines", None)
    plan["search"] = {"method": "random", "seed": rng.random()}
    return plan


PIPE_SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("kfkb", 2))


def group_step_ms(model: str, topo: str, plan: str, profile: str) -> list[float]:
    """Each group's forward + backward ms at the plan's whole batch on device 0 (the profiled cost model)."""
    from tag.cost.profile_db import load
    from tag.cost.profiled import ProfileCostModel
    from tag.modelio import load_inputs

    inp = load_inputs(model, topo, plan_path=plan)
    cost = ProfileCostModel(inp.gg, inp.training, load(profile))
    dev = inp.cluster.devices[0].type
    batch = sum(inp.strategy.decisions[0].rows)
    return [cost.group_fwd_ms(g, dev, batch) + cost.group_bwd_ms(g, dev, batch) for g in range(inp.gg.n_groups)]


def stage_cuts(times_ms: list[float]) -> dict[str, int]:
    """Two cuts c of the groups into stage 0 = groups [0, c) and stage 1 = [c, K): ``bal`` minimises the larger
    stage's time (ties: the lower c); ``unbal`` puts the share of the time closest to 1/4 on stage 0 (another c
    than ``bal``), so stage 1 takes about 3x stage 0's time.

    >>> stage_cuts([1.0, 1.0, 1.0, 1.0])
    {'bal': 2, 'unbal': 1}
    """
    total = sum(times_ms)
    pre = [sum(times_ms[:c]) for c in range(len(times_ms) + 1)]
    cuts = range(1, len(times_ms))
    bal = min(cuts, key=lambda c: (max(pre[c], total - pre[c]), c))
    unbal = min((c for c in cuts if c != bal), key=lambda c: (abs(pre[c] / total - 0.25), c), default=bal)
    return {"bal": bal, "unbal": unbal}


def pipeline_plan(single: dict, cut: int, devices: tuple[str, str], schedule: str, k: int, m: int) -> dict:
    """A 2-stage plan.json (version 2) from a single-device plan: groups [0, cut) with all rows on devices[0],
    the rest on devices[1]; m micro-batches under `schedule` (k for kfkb). Group ids must be in topological
    order (every edge goes from a lower id to a higher one), so the prefix cut is acyclic."""
    plan = json.loads(json.dumps(single))
    batch = plan["model"]["batch_size"]
    n = len(plan["decisions"])
    for g, dec in enumerate(plan["decisions"]):
        dec["rows"] = {devices[0] if g < cut else devices[1]: batch}
        dec["sync"], dec["server"], dec["sfb"] = None, None, []
    plan["version"] = 2
    plan["stages"] = [{"groups": list(range(cut)), "devices": [devices[0]]},
                      {"groups": list(range(cut, n)), "devices": [devices[1]]}]
    plan["micro_batches"], plan["schedule"], plan["k"] = m, schedule, k if schedule == "kfkb" else 1
    plan["predicted"] = {}
    plan.pop("baselines", None)
    plan["search"] = {"method": "pipeline-fidelity", "cut": cut}
    return plan


def build_pipeline_plans(model: str, topo: str, profile: str, batch: int, work: str, micro: list[int],
                         stem: str | None = None) -> dict:
    """name -> plan path: 2-stage pipelines on the topology's first two devices (`pipeline_plan`), for the
    balanced and the unbalanced cut (`stage_cuts` on the profiled group times), every schedule of
    `PIPE_SCHEDULES` and every micro-batch count in `micro` (k = 2 only where it divides m)."""
    stem = stem or os.path.splitext(os.path.basename(model))[0]
    single = os.path.join(work, f"{stem}-single-device.json")
    if not os.path.exists(single):
        _tag("plan", model, topo, "--baseline", "single-device", "--batch-size", str(batch), "--profile", profile,
             "-o", single)
    with open(single) as f:
        base = json.load(f)
    with open(topo) as f:
        t = json.load(f)
    devices = tuple(f"{mc['name']}/{i}" for mc in t["machines"]
                    for i in range(sum(d["count"] for d in mc["devices"])))  # topology order
    cuts = stage_cuts(group_step_ms(model, topo, single, profile))
    plans = {}
    for label, cut in cuts.items():
        for schedule, k in PIPE_SCHEDULES:
            for m in micro:
                if batch % m or (schedule == "kfkb" and m % k):
                    continue
                name = f"pipe-{label}-{schedule}{k if schedule == 'kfkb' else ''}-m{m}"
                p = os.path.join(work, f"{stem}-{name}.json")
                with open(p, "w") as f:
                    json.dump(pipeline_plan(base, cut, devices[:2], schedule, k, m), f, indent=1)
                plans[name] = p
    return plans


def zero_plan(base: dict, stage: int) -> dict:
    """A copy of a data-parallel plan.json with ZeRO `stage` on every replicated group with parameters."""
    plan = json.loads(json.dumps(base))
    for dec in plan["decisions"]:
        if dec.get("sync") is not None:
            dec["zero"] = stage
    plan["predicted"] = {}
    plan.pop("baselines", None)
    plan["search"] = {"method": f"zero{stage}-fidelity"}
    return plan


def shard_plan(single: dict, groups: list[int], devices: tuple[str, str]) -> dict:
    """A copy of a single-device plan.json whose `groups` split their weights by columns, half on each of
    `devices` (one replica: both devices compute every row)."""
    plan = json.loads(json.dumps(single))
    batch = plan["model"]["batch_size"]
    for g in groups:
        dec = plan["decisions"][g]
        dec["rows"] = {d: batch for d in devices}
        dec["shard"] = {"split": "column", "ratios": {d: 0.5 for d in devices}}
        dec["sync"], dec["server"], dec["sfb"] = None, None, []
    plan["predicted"] = {}
    plan.pop("baselines", None)
    plan["search"] = {"method": "shard-fidelity", "groups": groups}
    return plan


def build_memory_plans(model: str, work: str, plans: dict, stem: str | None = None) -> dict:
    """name -> plan path: dp-even at ZeRO 1, 2 and 3 (`zero_plan`), and the single-device plan with the groups
    that `tag deploy` accepts column-sharded over the first two devices (`shard_plan`: groups with parameters
    added one at a time while the plan still prepares as a deploy job; the first half and all of them)."""
    from tag.deploy.job import DeployOptions, prepare_job
    from tag.errors import InputError

    stem = stem or os.path.splitext(os.path.basename(model))[0]
    out = {}
    with open(plans["dp-even"]) as f:
        dp = json.load(f)
    for stage in (1, 2, 3):
        p = os.path.join(work, f"{stem}-zero{stage}.json")
        with open(p, "w") as f:
            json.dump(zero_plan(dp, stage), f, indent=1)
        out[f"zero{stage}"] = p
    with open(plans["single-device"]) as f:
        single = json.load(f)
    devices = tuple(list(max((d["rows"] for d in dp["decisions"]), key=len))[:2])
    ok: list[int] = []
    p = os.path.join(work, f"{stem}-shard-try.json")
    for g, dec in enumerate(single["decisions"]):
        if not any(dec2.get("sync") for dec2 in dp["decisions"][g:g + 1]):
            continue  # no parameters to split
        with open(p, "w") as f:
            json.dump(shard_plan(single, ok + [g], devices), f)
        try:
            prepare_job(p, model, DeployOptions(steps=2))
            ok.append(g)
        except InputError:
            continue
    for label, groups in (("shard-half", ok[: max(1, len(ok) // 2)]), ("shard-all", ok)):
        if groups and (label == "shard-all" or len(ok) > 1):
            q = os.path.join(work, f"{stem}-{label}.json")
            with open(q, "w") as f:
                json.dump(shard_plan(single, groups, devices), f, indent=1)
            out[label] = q
    return out
