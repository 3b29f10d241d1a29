"""`tag plan MODEL TOPOLOGY -o plan.json`: search a training strategy and compare it with every baseline.

Exit codes: 0 a plan that fits in memory; 2 bad input; 3 no strategy fits in memory (the least-overflowing
one is still written to -o); 1 an internal failure.
"""

from __future__ import annotations

from tag.cli.util import BASELINE_NAMES, add_model_flags, add_output_flags, add_precision_flag, add_verb
from tag.search.gc_pause import gc_paused
from tag.search.budget import (DEFAULT_BUDGET_S, DEFAULT_PLAYOUTS, DEFAULT_REFINE_SIMULATIONS, MIN_PLAYOUTS,
                               MIN_REFINE_SIMULATIONS, OTHER_REFINE_SHARE, POLISH_SHARE, SCALE_FROM)

EXIT_OOM = 3  # no strategy fits in memory (documented in --help)


def add_parser(sub):
    p = add_verb(sub, "plan", "search a training strategy (a tree over whole-plan structure, then GNN-guided per-group "
                 "MCTS and refinement) and compare it with every baseline",
                 "tag plan datasets/models/resnet50.onnx datasets/topologies/heterog8.json -o plan.json\n"
                 "  tag plan model.onnx topo.json --playouts 200 --seed 1 --no-gnn --json > plan.json\n"
                 "  tag plan datasets/models/mlp.onnx datasets/topologies/heterog8.json --no-gnn --no-shard "
                 "-o plan.json",
                 notes="exit codes:\n  0  the plan fits in memory\n  1  internal error\n"
                       "  2  bad input (one line on stderr)\n"
                       f"  {EXIT_OOM}  no strategy fits in memory: one line on stderr; the least-overflowing plan "
                       "is still written to -o")
    p.add_argument("model", help="the model .onnx")
    p.add_argument("topology", help="the cluster topology .json")
    p.add_argument("-o", "--output", metavar="P.json", default=None, help="write plan.json here")
    p.add_argument("--playouts", type=int, default=None, metavar="N",
                   help=f"structure-tree playouts: plan kind, stages, micro-batches and schedule, shards, ZeRO / "
                        f"recomputation and bucket size, each playout scoring one whole plan (default "
                        f"{DEFAULT_PLAYOUTS}, scaled down by {SCALE_FROM} / (groups x devices) above {SCALE_FROM} "
                        f"group-devices, at least {MIN_PLAYOUTS}); N // {POLISH_SHARE} per-group tree playouts "
                        "follow as polish. 0: the starts and refinement only. The search stops on these counts, so "
                        "the same inputs, counts and seed give the same plan under any load")
    p.add_argument("--simulations", type=int, default=None, metavar="N",
                   help=f"refinement simulations for the search's best plan (and for the best start when the tree "
                        f"changed the plan's structure), N // {OTHER_REFINE_SHARE} for each other start; default "
                        f"{DEFAULT_REFINE_SIMULATIONS}, scaled as "
                        f"--playouts, at least {MIN_REFINE_SIMULATIONS})")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help=f"wall-clock safety cap (default {DEFAULT_BUDGET_S:g}, never reached on the shipped datasets "
                        "at the default counts); if it cuts the search short, plan.json says search.capped: true "
                        "and the plan may differ run to run")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    p.add_argument("--jobs", type=int, default=None, metavar="J",
                   help="processes that plan (default: one per CPU this process may use; one above 128 devices, "
                        "where forking the search's large process costs more than it saves). The others run the "
                        "pipeline DP's searches and simulate the moves the search will try next; the plan is the "
                        "same with any number (1: one process)")
    gnn = p.add_mutually_exclusive_group()
    gnn.add_argument("--gnn", metavar="CKPT", default=None,
                     help="GNN checkpoint for the per-group polish's priors (default: the shipped one)")
    gnn.add_argument("--no-gnn", action="store_true",
                     help="uniform priors in both trees, no network (neither --gnn nor --structure-gnn)")
    p.add_argument("--structure-gnn", metavar="CKPT", default=None,
                   help="structure network checkpoint for the structure tree's priors, e.g. one `tag train --head "
                        "structure` fine-tuned on your profile (default: the shipped one)")
    p.add_argument("--no-sfb", action="store_true", help="do not choose sufficient-factor broadcasting")
    p.add_argument("--no-pipeline", action="store_true",
                   help="do not search micro-batched pipelines (stages, micro-batches, schedule); plan.json's "
                        "search.pipelines says whether they were considered")
    p.add_argument("--no-shard", action="store_true",
                   help="do not search tensor shards (a group's weights split over the devices of a machine, "
                        "by column, row or heads, with uneven shares solved by a linear program); plan.json's "
                        "search.shards says whether they were considered")
    p.add_argument("--no-refine", action="store_true", help="skip the local refinement after the tree search")
    p.add_argument("--no-as-deployed", action="store_true",
                   help="with a profile that has contention terms (`tag profile ops` on this machine), keep the "
                        "searched plan even when `tag deploy` predicts a baseline faster on this machine's ranks "
                        "(by default the plan is the finalist predicted fastest as deployed; plan.json's "
                        "search.as_deployed lists them)")
    p.add_argument("--baseline", choices=BASELINE_NAMES, metavar="NAME", default=None,
                   help="write this baseline as the plan instead of searching: " + ", ".join(BASELINE_NAMES))
    p.add_argument("--profile", metavar="F", default=None, help="profile.json with measured op times (default: roofline)")
    p.add_argument("--trace", metavar="T.json", default=None, help="write a Chrome trace of the plan's iteration")
    p.add_argument("--report", metavar="R.html", default=None,
                   help="also write the plan's HTML report here (as `tag report` does)")
    p.add_argument("--groups", type=int, default=None, metavar="K", help="number of op groups (default: 1.5 sqrt(ops) "
                   "within 16-48, raised to 2 per device up to 128; at most one per op); fewer groups hold less memory "
                   "in tag's runtime, more give placements room")
    add_model_flags(p)
    add_precision_flag(p, "the search chooses. It scores the starts (the baselines, and the memory pass's ZeRO / "
                          "recomputation variants of those that do not fit) under fp32 and under each precision every "
                          "device type supports and runs faster (a tensor-core peak in the catalog), and searches "
                          "under the fastest that fits; fp32 first, then tf32, bf16, fp16, each needing to be over "
                          "1%% faster than the one before it. plan.json's search.precision says what was chosen and "
                          "why. With --baseline: fp32")
    add_output_flags(p)
    return p


@gc_paused()  # loading the model and the networks too (~0.3 s of CPU in collector passes; tag.search.gc_pause)
def run(args) -> int:
    import math
    import os
    import sys

    from tag.cli.util import check_outputs, emit, progress
    from tag.errors import InputError
    from dataclasses import replace

    from tag.cli.inputs import load_verb_inputs, precision_costs
    from tag.search.budget import default_counts
    from tag.search.prefetch import default_workers
    from tag.search.planner import (GNN_MAX_DEVICES, PIPELINE_MAX_DEVICES, SFB_MAX_DEVICES, SHARD_MAX_DEVICES,
                                    memory_report, plan)
    from tag.strategy.planfile import baselines_summary, plan_to_json, predicted_from_result, write_plan
    from tag.cli._plan_report import report_text

    if args.playouts is not None and args.playouts < 0:
        raise InputError("--playouts", "N", "a non-negative integer", str(args.playouts))
    if args.simulations is not None and args.simulations < 0:
        raise InputError("--simulations", "N", "a non-negative integer", str(args.simulations))
    if args.jobs is not None and args.jobs < 1:
        raise InputError("--jobs", "J", "a positive integer (1: simulate in this process only)", str(args.jobs))
    if args.budget is not None and args.budget <= 0:
        raise InputError("--budget", "SECONDS", "a positive number", str(args.budget))
    check_outputs(args, {"output": "-o/--output", "trace": "--trace", "report": "--report"},
                  [args.model, args.topology, args.profile, args.gnn, args.structure_gnn])
    if args.structure_gnn is not None:
        if args.no_gnn:
            raise InputError("--structure-gnn", "CKPT", "a structure checkpoint without --no-gnn (which plans with "
                             "uniform priors)", args.structure_gnn)
        if not os.path.isfile(args.structure_gnn):
            raise InputError(args.structure_gnn, "--structure-gnn", "an existing structure checkpoint (tag train "
                             "--head structure -o CKPT)", "no such file")
    inp = load_verb_inputs(args)
    priors_fn, gnn_name, warnings, structure_priors_fn, structure_name = None, None, [], None, None

    def say(message: str, level: str = "note") -> None:  # a skipped part: plan.json search.warnings and stderr
        warnings.append(message)
        sys.stderr.write(f"tag plan: {level}: {message}\n")

    n = inp.cluster.n_devices
    use_gnn = args.baseline is None and not args.no_gnn
    if use_gnn and n > GNN_MAX_DEVICES:
        use_gnn = False
        say(f"GNN priors not used: {n} devices is above the networks' size limit ({GNN_MAX_DEVICES}): a forward "
            "pass over the device graph costs more there than the playouts it would guide; both trees search with "
            "uniform priors")
    if use_gnn:
        priors_fn, gnn_name = _load_gnn(args, inp)
        structure_priors_fn, structure_name = _structure_gnn(args, inp)
    use_sfb = args.baseline is None and not args.no_sfb
    if use_sfb:
        missing = _sfb_solver_missing()
        use_sfb = missing is None
        if missing:
            say(f"SFB skipped: its solver cannot be imported ({missing}); install ortools, or pass --no-sfb to plan "
                "without SFB", "warning")
    if use_sfb and n > SFB_MAX_DEVICES:
        use_sfb = False
        say(f"SFB not tried: {n} devices is above its selection model's size limit ({SFB_MAX_DEVICES}); sufficient "
            "factors cover the global batch, so their all-gathers grow with the replica count and rarely pay at this "
            "scale")
    for part, off, limit in (("pipelines", args.no_pipeline, PIPELINE_MAX_DEVICES),
                             ("shards", args.no_shard, SHARD_MAX_DEVICES)):
        if args.baseline is None and not off and n > limit:
            say(f"{part} not searched: {n} devices is above the {part[:-1]} search's size limit ({limit})")
    if not args.json:
        sys.stderr.write(f"tag plan: batch {inp.batch_size}, {inp.gg.n_groups} groups, {inp.cluster.n_devices} devices\n")

    if args.baseline is not None:
        from tag.search.baselines import run_baselines
        from tag.search.planner import PlanResult

        baselines = run_baselines(inp.gg, inp.cluster, inp.cost, inp.training)
        strategy, result = baselines[args.baseline]
        res = PlanResult(strategy=strategy, result=result, baselines=baselines, best_baseline=None,
                         method=f"baseline:{args.baseline}", playouts=0, seconds=0.0, seed=args.seed, simulations=0,
                         training=inp.training, cost=inp.cost)
    else:
        default_playouts, default_refine = default_counts(inp.gg.n_groups, inp.cluster.n_devices)
        playouts = default_playouts if args.playouts is None else args.playouts
        refine_simulations = default_refine if args.simulations is None else args.simulations
        bar = progress(total=playouts, desc="search", unit="playout")
        shown = {"simulations": 0, "best_ms": math.inf}

        def show() -> None:  # drawn by the next update or the bar's heartbeat
            best = f", best {shown['best_ms']:.2f} ms" if math.isfinite(shown["best_ms"]) else ""
            bar.set_postfix_str(f"{shown['simulations']} simulations{best}", refresh=False)

        def tick(done: int, best_ms: float) -> None:
            shown["best_ms"] = best_ms
            show()
            bar.update(1)

        def simulated(n: int) -> None:
            shown["simulations"] = n
            show()

        def phase(name: str) -> None:  # the bar counts the tree's playouts; its label says which part runs
            bar.set_description_str(name)
        try:
            res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=playouts,
                       refine_simulations=refine_simulations, budget_s=args.budget or DEFAULT_BUDGET_S,
                       seed=args.seed, priors_fn=priors_fn, refine=not args.no_refine,
                       sfb=use_sfb, on_progress=tick, pipeline=not args.no_pipeline,
                       cost_for=precision_costs(args, inp), shard=not args.no_shard,
                       structure_priors_fn=structure_priors_fn,
                       workers=default_workers() if args.jobs is None else args.jobs - 1, on_phase=phase,
                       on_simulation=simulated)
        finally:
            bar.close()
    inp = replace(inp, training=res.training, cost=res.cost)  # the precision searched under

    if res.result.oom and args.baseline is None:
        res = _least_overflowing(res, inp.cluster)
    deployed = None
    if args.baseline is None and not args.no_as_deployed:
        from tag.cli._plan_deployed import choose_as_deployed

        res, deployed = choose_as_deployed(res, inp, args.topology)
    if res.capped:
        sys.stderr.write(f"tag plan: warning: the --budget safety cap ({args.budget or DEFAULT_BUDGET_S:g} s) cut the "
                         f"search short ({res.playouts} playouts, {res.simulations} simulations); search.capped is "
                         "true and the plan may differ run to run: raise --budget or lower --playouts/--simulations\n")
    search = {"method": res.method, "playouts": res.playouts, "simulations": res.simulations, "capped": res.capped,
              "seconds": round(res.seconds, 3), "seed": args.seed, "gnn": gnn_name, "structure_gnn": structure_name,
              "warnings": warnings,
              "pipelines": res.pipelines, "shards": res.shards, "precision": _precision_report(args, res),
              "memory": res.memory or memory_report(res.strategy, {})}
    if res.structure:
        search["structure"] = res.structure
    search["as_deployed"] = None if deployed is None else deployed.to_json()
    from tag.sim.context import sim_context

    buckets = sim_context(inp.gg, inp.cluster, inp.cost, inp.training).bucket_syncs(res.strategy)
    obj = plan_to_json(res.strategy, inp.gg, inp.cluster, inp.training, args.model, args.topology,
                       predicted=predicted_from_result(res.result, inp.cost.name),
                       baselines=baselines_summary(res.baselines), search=search, bucket_syncs=buckets,
                       profile=args.profile, plan_path=args.output)
    if args.output:
        write_plan(args.output, obj)
    if args.trace:
        from tag.sim import simulate, write_chrome_trace

        write_chrome_trace(simulate(inp.gg, inp.cluster, inp.cost, res.strategy, inp.training, trace=True), args.trace)
    if args.report:
        from tag.report import gather, write_report

        write_report(args.report, gather(inp, res.strategy, obj, plan_path=args.output,
                                         baselines={n: r for n, (_, r) in res.baselines.items()}))
    if res.result.oom:  # res is the least-overflowing of the searched plan and the baselines (_least_overflowing)
        from tag.cli._plan_report import oom_line

        sys.stderr.write(f"tag plan: {oom_line(res, inp.cluster, args.output, args.baseline)}\n")
        if args.json:
            emit(args, obj, "")
        return EXIT_OOM
    emit(args, obj, report_text(inp, res, args.output, deployed))
    return 0


def _precision_report(args, res) -> dict:
    """plan.json search.precision: the search's choice (`tag.search.precision`), or how the precision was fixed."""
    if args.precision is not None:
        return {"chosen": args.precision, "by": "--precision"}
    if args.baseline is not None:
        return {"chosen": res.training.precision, "by": "default (--baseline plans in fp32 unless --precision)"}
    return res.precision


def _least_overflowing(res, cluster):
    """`res`, or `res` with the baseline that overflows memory less than the searched plan (method '...+oom-fallback:NAME')."""
    from dataclasses import replace

    from tag.cli._plan_report import least_overflowing

    name = least_overflowing(res, cluster)
    if name is None:
        return res
    strategy, result = res.baselines[name]
    return replace(res, strategy=strategy, result=result, method=f"{res.method}+oom-fallback:{name}", sfb={})


def _load_gnn(args, inp):
    """The priors callable and its checkpoint name: --gnn CKPT, else the shipped weights (evaluated in numpy,
    `tag.gnn.infer`: planning does not import torch). The GNN is never dropped silently: a missing shipped
    checkpoint is an InputError naming it and --no-gnn."""
    from tag.errors import InputError
    from tag.gnn import default_checkpoint, load_priors_fn

    where = args.gnn or "the shipped GNN checkpoint"
    ckpt = args.gnn or default_checkpoint()
    if ckpt is None:
        raise InputError(where, "GNN", "tag/gnn/pretrained in the installed package (or --gnn CKPT, or --no-gnn "
                         "to plan without the GNN)", "no checkpoint")
    return load_priors_fn(ckpt, inp.gg, inp.cluster, inp.cost, inp.training), str(ckpt)


def _structure_gnn(args, inp):
    """The structure tree's priors and their checkpoint: --structure-gnn CKPT, else the shipped structure network,
    loaded on the tree's first call ((None, None) when the package ships none: uniform priors, and plan.json
    search.structure.priors says so)."""
    from tag.gnn.lazy import lazy_structure_priors_fn
    from tag.gnn.shipped import SHIPPED_STRUCTURE_NAME, shipped_checkpoint

    ckpt = args.structure_gnn or shipped_checkpoint(SHIPPED_STRUCTURE_NAME)
    if ckpt is None:
        return None, None
    return lazy_structure_priors_fn(ckpt, inp.gg, inp.cluster, inp.cost, inp.training), str(ckpt)


def _sfb_solver_missing() -> str | None:
    """Why SFB selection cannot run (its CP-SAT solver, ortools, does not import), or None when it can."""
    try:
        import importlib

        importlib.import_module("ortools.sat.python.cp_model_helper")  # what tag.compression.cpsat imports (not pandas)
    except ImportError as e:
        return f"{type(e).__name__}: {e}"
    return None
