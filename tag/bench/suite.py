"""The benchmark suite: every model x topology, each baseline, the searched plan (before and after SFB selection)
and the compute bound ("ideal": 1 / sum over devices of 1 / T_d, `tag.bench.ideal.compute_bound`), all measured
side by side in one run with the same cost model.

`run_suite` resolves every case's files and reads the profile first (a missing or bad one is an InputError
before any work), then runs the cases in order; a case that fails is kept with its error and the suite goes on.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from tag.bench.data import CaseFiles, case_files

MODELS = ("vgg19", "resnet50", "resnet101", "inception_v3", "transformer_base", "bert_large", "gpt2_medium", "dlrm")
TOPOLOGIES = ("heterog8", "tag16", "hap64", "amp16", "modern8")
# The quick suite's models and topologies ship as package data (tag/bench/data/).
QUICK_MODELS = ("vgg19", "resnet50", "gpt2_medium")
QUICK_TOPOLOGIES = ("heterog8", "tag16", "hap64")
BASELINES = ("dp-even", "dp-proportional", "ps", "single-device", "m-etf", "m-topo")
# Search work per case: the quick suite's counts; the full suite takes the planner's defaults (None:
# tag.search.budget.default_counts). The wall-clock cap is the planner's safety cap in both: work counts decide
# every plan, so a run is reproducible whatever the machine's load (a case it cut short says so, `capped`).
QUICK_PLAYOUTS, QUICK_REFINE_SIMULATIONS = 60, 300


@dataclass(frozen=True)
class SuiteOptions:
    """What to run: the cases and the search settings of each (playouts and refinement simulations, None for
    the planner's defaults; the wall-clock safety cap in s; seed)."""

    models: tuple[str, ...]
    topologies: tuple[str, ...]
    playouts: int | None
    budget_s: float
    profile: str | None = None  # profile.json for the measured cost model (default: roofline)
    datasets_dir: str | None = None  # a datasets/ directory (default: the checkout's, else the package data)
    seed: int = 0
    refine_simulations: int | None = None
    precision: str | None = None  # the training precision of every case (None: the search chooses, as tag plan)


def suite_options(quick: bool = False, models=None, topologies=None, playouts: int | None = None,
                  budget_s: float | None = None, profile: str | None = None,
                  datasets_dir: str | None = None, seed: int = 0,
                  refine_simulations: int | None = None, precision: str | None = None) -> SuiteOptions:
    """SuiteOptions with the quick or full defaults for whatever is not given."""
    from tag.search.budget import DEFAULT_BUDGET_S

    return SuiteOptions(tuple(models or (QUICK_MODELS if quick else MODELS)),
                        tuple(topologies or (QUICK_TOPOLOGIES if quick else TOPOLOGIES)),
                        playouts or (QUICK_PLAYOUTS if quick else None),
                        budget_s or DEFAULT_BUDGET_S, profile, datasets_dir, seed,
                        refine_simulations or (QUICK_REFINE_SIMULATIONS if quick else None), precision)


@dataclass
class Case:
    """One model x topology: iteration ms per strategy name (inf when it does not fit in memory)."""

    model: str
    topology: str
    batch: int = 0
    groups: int = 0
    ms: dict[str, float] = field(default_factory=dict)  # baselines, "plan", "plan+sfb", "ideal" (the compute bound)
    flops_bound_ms: float = math.nan  # 3 x forward FLOPs x batch / summed FP32 peaks (`tag.bench.ideal.flops_bound_ms`)
    plan_kind: str = ""  # "pipeline" when the plan has stages and micro-batches, else "" (the search's start name)
    precision: str = "fp32"  # the precision the case was planned in (every column of the case is simulated in it)
    search_s: float = 0.0
    playouts: int = 0
    simulations: int = 0
    capped: bool = False
    error: str | None = None


def run_case(files: CaseFiles, model: str, topology: str, opts: SuiteOptions) -> Case:
    """Load one case, run every baseline and the search (`tag.search.planner.plan`, SFB on), and the bound."""
    from tag.bench.ideal import compute_bound, flops_bound_ms
    from tag.modelio import ModelOptions, cost_model_for, load_inputs
    from tag.search.planner import plan

    case = Case(model, topology)
    # the file's batch and shapes, Adam, the roofline cost model (or the profile's)
    inp = load_inputs(os.fspath(files.model_path), os.fspath(files.topology_path),
                      ModelOptions(profile=opts.profile, precision=opts.precision))
    case.batch, case.groups = inp.batch_size, inp.gg.n_groups
    t0 = time.monotonic()
    cost_for = None if opts.precision else (lambda p: cost_model_for(inp.gg, replace(inp.training, precision=p),
                                                                     files.topology_path, opts.profile))
    res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=opts.playouts, budget_s=opts.budget_s,
               seed=opts.seed, sfb=True, refine_simulations=opts.refine_simulations, cost_for=cost_for)
    case.search_s = time.monotonic() - t0
    case.precision = res.training.precision
    case.playouts, case.simulations, case.capped = res.playouts, res.simulations, res.capped
    for name, (_, r) in res.baselines.items():
        case.ms[name] = r.iteration_ms if not r.oom else math.inf
    nosfb = res.no_sfb_result
    case.ms["plan"] = nosfb.iteration_ms if not nosfb.oom else math.inf
    case.ms["plan+sfb"] = res.result.iteration_ms if not res.result.oom else math.inf
    case.ms["ideal"] = compute_bound(inp.gg, inp.cluster, res.cost, inp.batch_size).iteration_ms
    case.flops_bound_ms = flops_bound_ms(inp.gg, inp.cluster, inp.batch_size)
    pipe = res.strategy.pipeline
    case.plan_kind = (f"pipeline S={len(pipe.stages)} m={pipe.micro_batches} {pipe.schedule}"
                      + (f" k={pipe.k}" if pipe.schedule == "kfkb" else "")) if pipe is not None else ""
    return case


def run_suite(opts: SuiteOptions, on_case: Callable[[int, int, str], None] | None = None) -> list[Case]:
    """Every case of `opts`, in model-major order. on_case(done, total, "model on topology") is called before
    each case and once more at the end (done == total)."""
    pairs = [(m, t) for m in opts.models for t in opts.topologies]
    files = [case_files(m, t, opts.datasets_dir) for m, t in pairs]  # every file found before any work
    if opts.profile:
        from tag.cost.profile_db import load

        load(opts.profile)  # a bad profile is an InputError now, not an error in every case's row
    cases = []
    for i, ((m, t), f) in enumerate(zip(pairs, files)):
        if on_case:
            on_case(i, len(pairs), f"{m} on {t}")
        try:
            cases.append(run_case(f, m, t, opts))
        except Exception as e:  # a failing case is reported in its row, the suite goes on
            first = str(e).splitlines()[0][:80] if str(e) else ""
            cases.append(Case(m, t, error=f"{type(e).__name__}: {first}"))
    if on_case:
        on_case(len(pairs), len(pairs), "done")
    return cases
