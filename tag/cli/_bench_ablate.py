"""`tag bench --ablate`: the search's ablation table (`tag.bench.ablate`) over the suite's cases and random clusters.

Cases: every --models x --topologies pair (default: the quick suite's), then each model on `--random N` random
clusters (seeds 1..N, below the seeds `tag train` draws for either network, 10,000 and up for the per-group GNN
and 1,000,000 and up for the structure network, so neither trained on them; written to a temporary directory,
each named random-SEED). Every column of a case is a `tag plan` command line, listed under the table.

With `--results F.jsonl` each finished case is appended to F as it completes (`tag.bench.ablate_results`), a re-run
skips the cases F already holds with the same settings, and the tables are rendered from everything in F (so
several runs with different settings, e.g. a batch size for one topology, build one table). `--parts` plans some
columns only; lines of one case's parts planned by the same commit are read as one case, so a case too long for
one run is split over several runs or processes, and a re-run skips the cases F holds those parts of; `--render-only`
renders F without planning: everything in F, or with --models / --topologies (and --random) only that grid's cases,
listing those F does not hold yet. Cases planned before the results file recorded the latency floor get it computed
when rendered (their model and cluster read again: random clusters from their seed). One line
per finished case goes to stderr (and a progress bar on a terminal).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time


def ablate(args):
    """(markdown, JSON object, exit code: 1 when a case failed)."""
    from tag.bench.ablate import AblationSettings
    from tag.bench.ablate_format import ablation_report
    from tag.bench.ablate_results import case_key, case_record, read_results

    settings = AblationSettings(args.batch_size, args.optimizer, args.playouts, args.simulations, args.seed)
    done = read_results(args.results) if args.results else []
    if args.render_only:
        commands, cases, missing = [], done, []
        if args.models or args.topologies:  # only the grid's cases, and those of it F does not hold
            grid = _grid_names(args)
            cases = [c for c in done if (c.model, c.topology) in set(grid)]
            held = {(c.model, c.topology) for c in cases}
            missing = [f"{m} on {t}" for m, t in grid if (m, t) not in held]
    else:
        cases, commands = _run(args, settings, {case_key(c.model, c.topology, c.settings): c for c in done})
        missing = []
        if args.results:
            cases = read_results(args.results)
    _fill_floors(args, cases)
    text = "# tag bench --ablate\n\n" + ablation_report(cases, commands, missing)
    obj = {"cases": [dict(case_record(c), shares=c.shares()) for c in cases], "missing": missing}
    failed = [c for c in cases if c.error]
    for c in failed:
        sys.stderr.write(f"tag bench: {c.model} on {c.topology} failed: {c.error}\n")
    return text, obj, 1 if failed else 0


def _fill_floors(args, cases) -> None:
    """The latency floor of every finished case that lacks one (`tag.bench.ablate.case_floor_ms`)."""
    from tag.bench.ablate import case_floor_ms, random_topology_file
    from tag.bench.data import case_files
    from tag.bench.suite import QUICK_TOPOLOGIES
    from tag.errors import InputError

    todo = [c for c in cases if c.error is None and not math.isfinite(c.floor_ms) and c.ms]
    with tempfile.TemporaryDirectory(prefix="tag-ablate-") as tmp:
        for c in todo:
            seed = c.random_seed
            try:
                files = case_files(c.model, QUICK_TOPOLOGIES[0] if seed is not None else c.topology, args.datasets)
            except InputError:  # e.g. a cluster imported into another --datasets: its floor stays "-"
                continue
            topo = random_topology_file(seed, tmp) if seed is not None else os.fspath(files.topology_path)
            c.floor_ms = case_floor_ms(c, os.fspath(files.model_path), topo)


def _grid_names(args) -> list[tuple[str, str]]:
    """(model, topology) names of the grid the flags ask for, random clusters last."""
    from tag.bench.suite import QUICK_MODELS, QUICK_TOPOLOGIES

    models = tuple(args.models or QUICK_MODELS)
    topologies = tuple(args.topologies or (() if args.random else QUICK_TOPOLOGIES))
    return [(m, t) for m in models for t in topologies] + \
        [(m, f"random-{seed}") for seed in range(1, (args.random or 0) + 1) for m in models]


def _run(args, settings, held: dict) -> tuple[list, list[str]]:
    """Plan `--parts` (default: every part) of every case of the grid, those the results file lacks
    (`parts_to_plan`; `held`: case key -> the case the file holds); (the cases planned, the first case's command
    lines)."""
    from tag.bench.ablate import PARTS, AblationCase, command_line, random_topology_file, run_ablation
    from tag.bench.ablate_results import append_result, case_key, code_commit, parts_to_plan
    from tag.bench.data import case_files
    from tag.bench.suite import QUICK_TOPOLOGIES
    from tag.cli.util import progress

    names = _grid_names(args)
    files = {}  # every file before any work, so a typo fails at once
    for m, t in names:
        files[m, t] = case_files(m, QUICK_TOPOLOGIES[0] if t.startswith("random-") else t, args.datasets)
    parts = tuple(args.parts or PARTS)
    commit = code_commit()
    plan_parts = {(m, t): parts_to_plan(held.get(case_key(m, t, settings)), parts, commit) for m, t in names}
    todo = [(m, t) for m, t in names if plan_parts[m, t]]
    if args.results:
        which = "" if parts == PARTS else f" (parts: {', '.join(parts)})"
        sys.stderr.write(f"tag bench --ablate: {len(names)} cases, {len(names) - len(todo)} already in "
                         f"{args.results}{which}, {len(todo)} to run (code {commit or 'not in git'})\n")
    cases: list = []
    with tempfile.TemporaryDirectory(prefix="tag-ablate-") as tmp:
        bar = progress(total=len(todo), desc="ablate", unit="case")
        try:
            for i, (m, t) in enumerate(todo, start=1):
                bar.set_postfix_str(f"{m} on {t}")
                seed = int(t.split("-", 1)[1]) if t.startswith("random-") else None
                topo_path = (random_topology_file(seed, tmp) if seed is not None
                             else os.fspath(files[m, t].topology_path))
                began = time.monotonic()
                try:
                    case = run_ablation(os.fspath(files[m, t].model_path), topo_path, model=m, topology=t,
                                        playouts=args.playouts, refine_simulations=args.simulations,
                                        budget_s=args.budget, seed=args.seed, batch_size=args.batch_size,
                                        optimizer=args.optimizer, random_seed=seed, parts=plan_parts[m, t])
                except Exception as e:  # a failing case is reported in its row, the run goes on
                    first = str(e).splitlines()[0][:80] if str(e) else ""
                    case = AblationCase(m, t, error=f"{type(e).__name__}: {first}", settings=settings,
                                        random_seed=seed)
                case.commit = commit
                if args.results:
                    append_result(args.results, case)
                cases.append(case)
                bar.write(_case_line(i, len(todo), case, time.monotonic() - began), file=sys.stderr)
                bar.update(1)
        finally:
            bar.close()
    commands = []
    if names:  # the first case's command lines (random clusters are in the temporary directory only)
        m, t = names[0]
        topo = "random-1.json" if t.startswith("random-") else os.fspath(files[m, t].topology_path)
        commands = [f"{p}: " + command_line(p, os.fspath(files[m, t].model_path), topo, args.playouts, args.seed,
                                            args.simulations, args.batch_size, args.optimizer) for p in parts]
    return cases, commands


def _case_line(i: int, n: int, case, wall_s: float) -> str:
    """One finished case on stderr: its index, names, the ms of its first and last part planned, wall seconds."""
    head = f"ablate {i}/{n}: {case.model} on {case.topology}"
    if case.error:
        return f"{head}: failed: {case.error} ({wall_s:.0f} s)"

    from tag.bench.ablate import PARTS

    def ms(part: str) -> str:
        v = case.ms[part]
        return f"{part} " + ("OOM" if v == math.inf else f"{v:.2f} ms")

    planned = [p for p in PARTS if p in case.ms]
    shown = ", ".join(ms(p) for p in dict.fromkeys([planned[0], planned[-1]])) if planned else "no part"
    return f"{head} ({case.precision}, batch {case.batch_size}): {shown}, bound {case.bound_ms:.2f} ms ({wall_s:.0f} s)"
