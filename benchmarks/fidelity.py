"""Fidelity: predicted (profiled cost model + measured topology) vs measured (`tag deploy`) step times.

Usage: python benchmarks/fidelity.py [--models mlp,small_cnn,small_transformer,fc_wide] [--nproc 2]
       [--random 4] [--steps 6] [--batch-size 64] [--out benchmarks/fidelity.md] [--work DIR]
       [--pipeline-models mlp,small_transformer,gpt2_tiny] [--pipeline-micro 2,4] [--pipeline-only]

For each model it measures the topology of `--nproc` local ranks (`tag profile links`, once) and the model's
ops (`tag profile ops`, one thread, as deploy runs them), then builds at least 10 strategies: every baseline
(`tag plan --baseline`), two searched plans (`tag plan`, seeds 0 and 1) and `--random` random valid strategies
(seeded: random device subsets, uneven row splits, allreduce/ps sync); models in `--pipeline-models` also get
2-stage pipelined plans (`build_pipeline_plans`: a balanced and an unbalanced cut, gpipe / 1f1b / kfkb k = 2,
`--pipeline-micro` micro-batch counts; `--pipeline-only` for those alone). Each plan is predicted in-process
with the simulator on the profiled cost model as the deploy runtime runs a step (`overlap_sync=False`: syncs
after the whole backward; `blocking_sends=True`: every exchange a rendezvous of its two ranks; the profile's
``step`` block: compute inside the step, optimizer update, sync copies) and measured by the `tag deploy` runtime: the same jobs `tag deploy` prepares,
run one after another in one torchrun launch (`emulate/batch_worker.py`; median step after a warm-up step),
so torch start-up is paid once rather than per plan; the worker also times every phase of the step per rank
(`emulate/phases.py`), printed next to the simulator's tasks in a per-phase table. It prints and writes a markdown table: per plan predicted and measured ms; per model and
overall MAPE (mean |pred - meas| / meas) and Kendall's tau-b of predicted vs measured. The machine load
(/proc/loadavg) before and after is recorded in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulate.phase_table import phase_line, phase_report, predict_phases  # noqa: E402
from emulate.suite_plans import (_tag, build_memory_plans, build_pipeline_plans, group_step_ms,  # noqa: E402,F401
                                 pipeline_plan, random_plan, shard_plan, stage_cuts, zero_plan)
from emulate.report import Row, emulated_report, kendall_tau_b, mape, report  # noqa: E402,F401  (re-exported for
#   `emulate.cluster_run` (fid.Row) and the tests)
from tag.memory import keep_freed_memory, use_huge_pages  # noqa: E402

MODELS = os.path.join(HERE, "..", "datasets", "models")
BASELINES = ["dp-even", "dp-proportional", "ps", "single-device", "m-etf", "m-topo"]


def predict_ms(model: str, topo: str, plan: str, profile, overlap_sync: bool = False,
               contention: dict | None = None, speed: float = 1.0, speed_together: float | None = None) -> float:
    """Simulated iteration time of a plan on the profiled cost model, ms (as deploy runs it: no sync overlap,
    blocking exchanges; `overlap_sync=True`: the planner's DDP-style overlap and asynchronous sends).

    `profile` is a path, or a list of paths (one per device type, as `emulate.cluster_run` measures them).
    `contention` (the handoff probe's figures) adds the contention term: compute and updates stretched by
    `contention_stretch` (alone / together figures per rank) and ``handoff_ms`` added to the latency of
    every device pair (a rank that waited for a message resumes only when the scheduler gives it a core back).
    `speed` multiplies every compute time (`speed_from_reference`: the machine's speed at measurement time vs the profile's);
    with `speed_together` (the same with every rank stepping at once) the contention column uses
    `concurrent_speed` instead: between the two by the plan's simulated concurrency.
    The ring collectives run at the measured all-reduce rate of the topology (`collective_hop_gbps`), and the
    barrier that ends every measured step (`tag.deploy.train`, `emulate/batch_worker.py`) is added at the
    topology's measured cost (`barrier_ms`: its smallest all-reduce).
    """
    import numpy as np

    from tag.cost.profile_db import load
    from tag.cost.profiled import MultiProfileCostModel, ProfileCostModel
    from tag.modelio import load_inputs
    from tag.sim import simulate

    from tag.profile.links import barrier_ms, collective_hop_gbps

    profiles = [profile] if isinstance(profile, str) else list(profile)
    inp = load_inputs(model, topo, plan_path=plan)
    with open(topo) as f:
        topo_obj = json.load(f)
    ring_gbps = collective_hop_gbps(topo_obj)  # the measured ring rate (None: the links' rate)
    fence_ms = barrier_ms(topo_obj) or 0.0  # each measured step ends at a barrier of all ranks

    def run(stretch: list[float]):
        models = {}
        for path, k in zip(profiles, stretch):
            db = load(path)
            models[db.device_type] = ProfileCostModel(inp.gg, inp.training, db, compute_scale=k * speed,
                                                      collective_gbps=ring_gbps)
        cost = MultiProfileCostModel(inp.gg, inp.training, models)
        return simulate(inp.gg, inp.cluster, cost, inp.strategy, inp.training, overlap_sync=overlap_sync,
                        blocking_sends=not overlap_sync)

    res = run([1.0] * len(profiles))
    if contention:  # the emulated cluster's probe (per device type), with the product's formulas
        from tag.cost.contention import between, concurrency

        off_diag = ~np.eye(inp.cluster.n_devices, dtype=bool)
        inp.cluster.latency_us[off_diag] += 1e3 * contention["handoff_ms"]
        c, n = concurrency(res.busy_ms, res.iteration_ms, inp.cluster.n_devices)
        alone, together = contention["alone_stretch"], contention["together_stretch"]
        if len(alone) != len(profiles):  # one device type for all ranks: the ranks' mean figures
            alone = [sum(alone) / len(alone)] * len(profiles)
            together = [sum(together) / len(together)] * len(profiles)
        k = between(speed, speed_together, c, n) / speed if speed_together is not None else 1.0
        res = run([k * between(a, t, c, n) for a, t in zip(alone, together)])
    return float(res.iteration_ms) + fence_ms


def build_plans(model: str, topo: str, profile: str, batch: int, work: str, n_random: int, seed: int,
                stem: str | None = None) -> dict:
    """name -> plan path: the baselines, two searched plans and `n_random` random valid strategies."""
    stem = stem or os.path.splitext(os.path.basename(model))[0]
    plans = {}
    for b in BASELINES:
        p = os.path.join(work, f"{stem}-{b}.json")
        _tag("plan", model, topo, "--baseline", b, "--batch-size", str(batch), "--profile", profile, "-o", p)
        plans[b] = p
    for s in (0, 1):
        p = os.path.join(work, f"{stem}-search{s}.json")
        _tag("plan", model, topo, "--batch-size", str(batch), "--profile", profile, "--playouts", "60",
             "--seed", str(s), "--no-gnn", "--no-as-deployed", "-o", p)  # the search's own plans, not a baseline
        plans[f"search-s{s}"] = p
    with open(plans["dp-even"]) as f:
        base = json.load(f)
    rng = random.Random(seed)
    n_dev = len(base["decisions"][0]["rows"])
    for i in range(n_random):
        p = os.path.join(work, f"{stem}-random{i}.json")
        with open(p, "w") as f:
            json.dump(random_plan(base, n_dev, rng), f, indent=1)
        plans[f"random-{i}"] = p
    return plans


def handoff_probe(nproc: int, work: str) -> dict:
    """The contention figures under the current load (`emulate/handoff_probe.py` on 2 local ranks)."""
    out = os.path.join(work, "handoff.json")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                    os.path.join(HERE, "emulate", "handoff_probe.py"), out], env=env, capture_output=True,
                   check=True, timeout=600)
    with open(out) as f:
        return json.load(f)


def speed_from_reference(profile: str, reference: dict) -> tuple[float, float]:
    """(alone, together): this machine's speed while the plans were measured relative to when `profile` was
    taken: the reference step's thread CPU ms (`emulate/speed_probe.py`, timed by the batch worker in every
    round: rank 0 alone at the batch's rows; every rank at once at rows / ranks) / the same step in the
    profile's ``step`` block at those rows, medians over the rounds (1.0 where the step block lacks the
    rows). `together` is what every rank computing at the same time costs in CPU time (shared caches, memory
    bandwidth, the host's SMT siblings)."""
    import statistics

    from tag.cost.profile_db import load

    st = load(profile).step

    def ratio(rows: int, now_ms: list[float]) -> float:
        if st is None or rows not in st.rows:
            return 1.0
        i = st.rows.index(rows)
        then = sum(g.fwd_ms[i] + g.bwd_ms[i] for g in st.groups) + st.update_ms[i] + st.other_ms[i]
        return statistics.median(now_ms) / then if then > 0 else 1.0

    return (ratio(reference["rows"], reference["alone_cpu_ms"]),
            ratio(reference.get("together_rows", reference["rows"]), reference["together_cpu_ms"]))


def probe_mean(probes: list[dict]) -> dict:
    """Mean of several `emulate/handoff_probe.py` results: handoff ms, and per rank the alone and together
    stretches (the emulated cluster's contention figures)."""
    n = len(probes)
    ranks = range(len(probes[0]["alone_stretch_by_rank"]))
    return {"handoff_ms": sum(p["handoff_ms"] for p in probes) / n,
            "alone_stretch": [sum(p["alone_stretch_by_rank"][i] for p in probes) / n for i in ranks],
            "together_stretch": [sum(p["sustained_stretch_by_rank"][i] for p in probes) / n for i in ranks]}


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def profile_ops(model: str, batch: int, rows: str, out: str, wrap=None, ranks: int = 0,
                device_type: str | None = None, clock: str = "thread") -> None:
    """`tag profile ops` as a user runs it (one thread, thread CPU clock, the contention probe on `ranks` ranks;
    0: none, as under a wrapper: the emulated cluster probes across its namespaces), optionally under a wrapper and
    for a named device type (an emulated machine's, under its CPU quota, which the profile records)."""
    cmd = [sys.executable, "-m", "tag.cli", "profile", "ops", model, "--batch-size", str(batch), "--rows", rows,
           "--clock", clock, "--ranks", str(ranks), "-o", out, "--json"]
    cmd += ["--device-type", device_type] if device_type else []
    p = subprocess.run(wrap(cmd) if wrap else cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"tag profile ops {model} failed: {p.stderr.strip()[-600:]}")


def prepare_jobs(entries: list[tuple[str, str, str]], steps: int, work: str) -> list[str]:
    """Job pickles for (key, plan, model) entries, as `tag deploy` prepares them (same checks), paths."""
    from tag.deploy.job import DeployOptions, prepare_job, save_job

    from tag.errors import InputError

    paths = []
    for key, plan, model in entries:
        path = os.path.join(work, key.replace("/", "--") + ".job.pkl")
        for stale in (path + ".result.json", path + ".error"):
            if os.path.exists(stale):
                os.remove(stale)
        paths.append(path)
        try:
            job = prepare_job(plan, model, DeployOptions(steps=steps, timeout_s=600.0))
        except InputError as e:  # reported as "no measurement" with the reason in <job>.error
            with open(path + ".error", "w") as f:
                f.write(f"InputError: {e}\n")
            continue
        save_job(job, path)
    return paths


def measure_batch(paths: list[str], nproc: int, work: str, prefix: list[str] | None = None, rounds: int = 3,
                  log_name: str = "batch.log") -> None:
    """Run the job pickles in one torchrun launch of `nproc` local ranks (`emulate/batch_worker.py`)."""
    jobs_file = os.path.join(work, "jobs.json")
    with open(jobs_file, "w") as f:
        json.dump([p for p in paths if not os.path.exists(p + ".error")], f)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = (prefix or []) + [sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={nproc}", os.path.join(HERE, "emulate", "batch_worker.py"), jobs_file, str(rounds)]
    with open(os.path.join(work, log_name), "w") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=3600)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,small_cnn,small_transformer,fc_wide")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--random", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4, help="steps per round (the first untimed)")
    ap.add_argument("--rounds", type=int, default=3, help="round-robin rounds over all plans")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", default="4,8,16,32,48,64")
    ap.add_argument("--work", default=None, help="keep plans, profiles and results here (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse the topology, profiles and plans in --work (measure again)")
    ap.add_argument("--no-measure", action="store_true", help="predict only, reading earlier results in --work")
    ap.add_argument("--no-speed-check", action="store_true",
                    help="predict without the speed check `tag deploy` takes before its ranks start (its factors are "
                         "kept in --work: with --reuse --no-measure, the same measurements re-predicted without it)")
    ap.add_argument("--overlap-sync", action="store_true",
                    help="predict with DDP-style sync overlap (the planner's default) instead of as deploy runs")
    ap.add_argument("--emulate-mbit", default=None, metavar="R,R",
                    help="also run on an emulated cluster: one machine (namespace) per NIC rate in Mbit/s")
    ap.add_argument("--emulate-quota", default="0.5,0.25", metavar="Q,Q",
                    help="CPU quota (share of a core) of each emulated machine's device")
    ap.add_argument("--emulate-models", default="mlp,small_cnn")
    ap.add_argument("--emulate-only", action="store_true", help="skip the loopback table")
    ap.add_argument("--pipeline-models", default="mlp,small_transformer,gpt2_tiny",
                    help="models of --models that also get 2-stage pipelined plans (`build_pipeline_plans`)")
    ap.add_argument("--pipeline-micro", default="2,4", help="micro-batch counts of the pipelined plans")
    ap.add_argument("--memory-models", default="mlp,small_cnn,small_transformer,fc_wide",
                    help="models of --models that also get ZeRO 1-3 and tensor-sharded plans (`build_memory_plans`)")
    ap.add_argument("--pipeline-only", action="store_true",
                    help="only the pipelined plans (no baselines, searched or random plans)")
    ap.add_argument("--out", default=os.path.join(HERE, "fidelity.md"))
    ap.add_argument("--autogroup-nice", type=int, default=None, metavar="N",
                    help="run this process's session and every rank's at autogroup nice N (tag/profile/autogroup.py: "
                         "other sessions' jobs, even at nice 19, otherwise take an equal share of the cores)")
    a = ap.parse_args()
    use_huge_pages()  # the profiles, probes and deploy workers it starts run as tag's own processes do
    keep_freed_memory()  # and so does its own speed check (tag.memory)
    if a.autogroup_nice is not None:
        from tag.profile.autogroup import ENV, apply_from_env

        os.environ[ENV] = str(a.autogroup_nice)  # every rank it starts applies it too (batch_worker.py)
        apply_from_env()
    import tempfile
    work = a.work or tempfile.mkdtemp(prefix="tag-fidelity-")
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    topo = os.path.join(work, f"local{a.nproc}.json")
    if not (a.reuse and os.path.exists(topo)):
        _tag("profile", "links", "--nproc", str(a.nproc), "-o", topo)
    text = "" if a.emulate_only else local_table(a, work, topo, t0)
    if a.emulate_mbit:
        sys.path.insert(0, HERE)
        from emulate.cluster_run import emulated_rows

        rates = [float(v) for v in a.emulate_mbit.split(",")]
        quotas = [float(v) for v in a.emulate_quota.split(",")]
        load0 = loadavg()
        erows, info = emulated_rows(sys.modules[__name__], a.emulate_models.split(","), rates, quotas, a, work,
                                    lambda m: print(m, file=sys.stderr))
        text += emulated_report(erows, info, load0, loadavg())
    print(text)
    with open(a.out, "w") as f:
        f.write(text)


def local_table(a, work: str, topo: str, t0: float) -> str:
    """The loopback fidelity table (profiles, plans, batch measurement, predictions) as markdown."""
    from tag.cli.deploy import predict_as_run
    from tag.deploy.job import load_job
    from tag.profile.speed_check import SpeedCheck, speed_check

    entries, paths = [], []
    state_path = os.path.join(work, "contention.json")
    load_before = loadavg()
    speeds: dict[str, float] = {}
    checks: dict[str, dict | None] = {}
    for name in a.models.split(","):  # each model profiled and measured back to back: the machine's speed drifts
        model = os.path.join(MODELS, f"{name}.onnx")
        prof = os.path.join(work, f"{name}-profile.json")
        if not (a.reuse and os.path.exists(prof)):
            profile_ops(model, a.batch_size, a.rows, prof, ranks=a.nproc)
        plans_path = os.path.join(work, f"{name}-plans.json")
        if a.reuse and os.path.exists(plans_path):
            with open(plans_path) as f:
                plans = json.load(f)
        else:
            plans = {} if a.pipeline_only else build_plans(model, topo, prof, a.batch_size, work, a.random, a.seed)
            if not a.pipeline_only and name in a.memory_models.split(","):
                plans.update(build_memory_plans(model, work, plans))
            if name in a.pipeline_models.split(","):
                micro = [int(v) for v in a.pipeline_micro.split(",")]
                plans.update(build_pipeline_plans(model, topo, prof, a.batch_size, work, micro))
            with open(plans_path, "w") as f:
                json.dump(plans, f)
        mine = [(f"{name}/{label}", plan, model, prof) for label, plan in plans.items()]
        entries += mine
        print(f"  planned {name}: {len(plans)} plans", file=sys.stderr)
        if a.no_measure:
            paths += [os.path.join(work, k.replace("/", "--") + ".job.pkl") for k, _, _, _ in mine]
        else:
            got = prepare_jobs([(k, p, m) for k, p, m, _ in mine], a.steps, work)
            check = speed_check(model, prof, a.batch_size)  # right before the ranks start, as `tag deploy` takes it
            checks[name] = check.to_json() if check else None
            measure_batch(got, a.nproc, work, rounds=a.rounds, log_name=f"batch-{name}.log")
            with open(os.path.join(work, "jobs.json.reference.json")) as f:
                speeds[name] = speed_from_reference(prof, json.load(f)[model])[0]
            paths += got
    if not a.no_measure:
        with open(state_path, "w") as f:
            json.dump({"load_before": load_before, "load_after": loadavg(), "speed": speeds, "speed_check": checks}, f)
    with open(state_path) as f:
        sh = json.load(f)
    speeds = sh.get("speed", {})
    checks = {} if a.no_speed_check else sh.get("speed_check", {})
    load_before, load_after = sh["load_before"], sh["load_after"]
    rows, phase_lines, probes = [], [], {}
    for (key, plan, model, prof), path in zip(entries, paths):
        try:
            with open(path + ".result.json") as f:
                res = json.load(f)
        except OSError:
            print(f"  {key}: no measurement ({path}.error)", file=sys.stderr)
            continue
        m = key.split("/")[0]
        job = load_job(path)
        c = checks.get(m)
        factor = SpeedCheck(c["rows"], c["profile_ms"], c["now_ms"]).factor if c else 1.0
        product = predict_as_run(job, speed=factor).step_ms  # what `tag deploy` prints (its speed check included)
        planner = predict_ms(model, topo, plan, prof, overlap_sync=True)
        drift = predict_as_run(job, speed=speeds.get(m, 1.0)).step_ms
        probes[m] = load_profile_contention(prof)
        rows.append(Row(*key.split("/"), product, planner, drift, res["measured_step_ms"], res["cpu_ms"]))
        if res.get("phases_by_rank") and not key.split("/")[1].startswith("pipe-"):  # (per group: no pipelines)
            phase_lines.append(phase_line(*key.split("/"), predict_phases(model, topo, plan, prof), res["phases_by_rank"]))
        print(f"  {key:34s} predicted {product:9.2f} ms  measured {res['measured_step_ms']:9.2f} ms", file=sys.stderr)
    text = report(rows, a, load_before, load_after, probes, time.time() - t0) + phase_report(phase_lines)
    if checks:
        text += ("\nSpeed check (`tag.profile.speed_check`: the profile's reference step re-timed right before each model's "
                 "ranks start, as `tag deploy` does; the product column's compute is multiplied by it): "
                 + ", ".join(f"{m} x{SpeedCheck(c['rows'], c['profile_ms'], c['now_ms']).factor:.2f} "
                             f"({c['now_ms']:.1f} / {c['profile_ms']:.1f} ms at {c['rows']} rows)"
                             for m, c in checks.items() if c) + "\n")
    if speeds:
        text += ("\nBenchmark-only drift (`speed_from_reference`: the single-rank reference step's thread CPU ms in the "
                 "batch worker over the same step in the profile, median over the rounds; the `product x drift` column "
                 "multiplies compute by it): " + ", ".join(f"{m} x{v:.2f}" for m, v in speeds.items()) + "\n")
    return text


def load_profile_contention(prof: str) -> dict:
    """The contention block `tag profile ops` wrote into a profile (its figures for the report)."""
    with open(prof) as f:
        return json.load(f).get("contention") or {}


if __name__ == "__main__":
    main()
