"""`tag bench [--quick] [--published] ...`: parses the flags, runs `tag.bench`, prints the table (or JSON)."""

from __future__ import annotations

import sys

from tag.cli.util import add_output_flags, add_precision_flag, add_verb, check_outputs, emit, positive_int, progress

DESCRIPTION = (
    "Run the benchmark suite: for every model x topology, every baseline, the searched plan before and after SFB "
    "selection and the ideal bound, simulated side by side in one run and shown as speedups over dp-even. "
    "--quick runs the models and topologies that ship with tag (vgg19, resnet50, gpt2_medium on heterog8, tag16, "
    "hap64) with a small search; the full suite reads a tag source checkout's datasets/ (--datasets DIR).\n"
    "--published instead holds the catalog cost model's single-GPU and 8-GPU predictions against published "
    "measurements (tables shipped with tag) and reports the GPU parameters; --fit refits them first.")


def add_parser(sub):
    p = add_verb(sub, "bench", "run the benchmark suite (or --published: predictions against published GPU figures)",
                 "tag bench --quick\n  tag bench --published\n  tag bench --models resnet50 --topologies tag16 "
                 "--playouts 60 --out results.md\n  tag bench --ablate --models mlp --topologies cpu4 --playouts 8 "
                 "--simulations 100", description=DESCRIPTION,
                 notes="exit codes: 0 all cases ran, 1 a case failed (its row says why), 2 bad input")
    p.add_argument("--quick", action="store_true", help="the shipped models and topologies, small search (minutes)")
    p.add_argument("--published", action="store_true",
                   help="hold single-GPU and 8-GPU predictions against published measurements instead")
    p.add_argument("--fit", action="store_true", help="with --published: refit the GPU parameters first (slow)")
    p.add_argument("--logo", action="store_true", help="with --published: also the leave-one-GPU-out error (slow)")
    p.add_argument("--profile", metavar="F", default=None, help="profile.json with measured op times")
    p.add_argument("--playouts", type=positive_int, default=None, metavar="N",
                   help="search playouts per case (default: 60 with --quick, else tag plan's default)")
    p.add_argument("--simulations", type=positive_int, default=None, metavar="N",
                   help="refinement simulations per case (default: 300 with --quick, else tag plan's default)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="wall-clock safety cap per case (default: tag plan's); work counts decide the plans")
    p.add_argument("--models", nargs="+", default=None, metavar="NAME", help="model names (datasets/models/NAME.onnx)")
    p.add_argument("--topologies", nargs="+", default=None, metavar="NAME",
                   help="topology names (datasets/topologies/NAME.json)")
    p.add_argument("--datasets", metavar="DIR", default=None,
                   help="a tag checkout's datasets/ directory (default: the checkout tag runs from, else the "
                        "models and topologies shipped with tag)")
    p.add_argument("--ablate", action="store_true",
                   help="the search's ablation instead: per case the plan of start, start+refine, tree (uniform), "
                        "tree (GNN), tree+refine and full (each a tag plan command line), the compute bound, the "
                        "latency floor (the kernel launches along the longest dependency chain), and the share of "
                        "the gain each part earns")
    p.add_argument("--random", type=positive_int, default=None, metavar="N",
                   help="with --ablate: also each model on N random clusters (seeds 1..N, never in the GNN's "
                        "training)")
    p.add_argument("--seed", type=int, default=0, help="with --ablate: the search seed (default 0)")
    p.add_argument("--results", metavar="F.jsonl", default=None,
                   help="with --ablate: append each finished case to F as it completes, skip the cases F already "
                        "holds with the same settings, and render the tables from everything in F")
    p.add_argument("--parts", metavar="P[,P...]", default=None, type=_parts,
                   help="with --ablate: plan only these columns, comma-separated (of: start, start+refine, "
                        "tree (uniform), tree (GNN), tree+refine, full); with --results, lines of one case's parts "
                        "made by the same commit read as one case, so a long case can be split over runs")
    p.add_argument("--render-only", action="store_true",
                   help="with --ablate --results F: render F's tables without planning (with --models / "
                        "--topologies: only that grid's cases, and those F does not hold yet listed as missing)")
    p.add_argument("--batch-size", type=positive_int, default=None, metavar="B",
                   help="with --ablate: every case's global batch (default: as tag plan, the file's batch if above "
                        "1, else 32 per device)")
    p.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default=None,
                   help="with --ablate: every case's optimizer (default: as tag plan, adam)")
    p.add_argument("--out", metavar="FILE.md", default=None, help="also write the markdown tables here")
    add_precision_flag(p, "each case's search chooses, as tag plan does (the bounds table names a precision other "
                          "than fp32); not with --published")
    add_output_flags(p)
    return p


def _parts(text: str) -> tuple[str, ...]:
    """--parts: comma-separated ablation parts, returned in the table's order (each once)."""
    from tag.bench.ablate import PARTS

    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in PARTS]
    if bad or not names:
        import argparse

        raise argparse.ArgumentTypeError(f"expected comma-separated parts of: {', '.join(PARTS)}; found "
                                         f"{bad[0] if bad else 'none'!r}")
    return tuple(p for p in PARTS if p in names)


def run(args) -> int:
    from tag.errors import InputError
    from tag.fileio import write_text_atomic

    check_outputs(args, {"out": "--out", "results": "--results"}, [args.profile])
    if args.published:
        for flag, given in (("--profile", args.profile), ("--models", args.models), ("--topologies", args.topologies),
                            ("--playouts", args.playouts),
                            ("--simulations", args.simulations), ("--budget", args.budget), ("--datasets", args.datasets),
                            ("--quick", args.quick), ("--precision", args.precision),
                            ("--ablate", args.ablate), ("--random", args.random), ("--results", args.results),
                            ("--render-only", args.render_only), ("--batch-size", args.batch_size),
                            ("--optimizer", args.optimizer), ("--parts", args.parts)):
            if given:
                raise InputError(flag, "with --published", "no suite flag (--published checks the catalog cost "
                                 "model against the published tables shipped with tag)", flag)
        text, obj = _published(args)
        code = 0
    else:
        if args.fit or args.logo:
            raise InputError("--fit" if args.fit else "--logo", "without --published",
                             "--published (--fit and --logo refit the published comparison's parameters)", "none")
        if args.budget is not None and args.budget <= 0:
            raise InputError("--budget", "SECONDS", "a positive number of seconds", str(args.budget))
        for flag, given in (("--random", args.random), ("--results", args.results),
                            ("--render-only", args.render_only), ("--batch-size", args.batch_size),
                            ("--optimizer", args.optimizer), ("--parts", args.parts)):
            if given and not args.ablate:
                raise InputError(flag, "without --ablate", f"--ablate ({flag} is the ablation's)", "none")
        if args.render_only and not args.results:
            raise InputError("--render-only", "without --results", "--results F.jsonl (the file to render)", "none")
        if args.ablate:
            from tag.cli._bench_ablate import ablate

            text, obj, code = ablate(args)
        else:
            text, obj, code = _suite(args)
    if args.out:
        write_text_atomic(args.out, _out_text(args, text))
    emit(args, obj, text)
    return code


def _out_text(args, text: str) -> str:
    """The --out file: the command that wrote it, (for --published) how the figures are made, the tables."""
    argv = ["tag", "bench"] + [a for a in sys.argv[2:] if a != "--json"] if sys.argv[1:2] == ["bench"] else None
    head, _, body = text.partition("\n\n")
    lines = [head, ""]
    if argv:
        lines += [f"Generated by `{' '.join(argv)}`.", ""]
    if args.published:
        from tag.bench.published_format import PREAMBLE

        lines += [PREAMBLE]
    return "\n".join(lines) + "\n" + body + "\n"


def _suite(args):
    """(markdown, JSON object, exit code: 1 when a case failed) of the suite the flags ask for."""
    from tag.bench.suite import run_suite, suite_options
    from tag.bench.suite_format import suite_json, suite_markdown

    opts = suite_options(args.quick, args.models, args.topologies, args.playouts, args.budget, args.profile,
                         args.datasets, refine_simulations=args.simulations, precision=args.precision)
    bar = progress(total=len(opts.models) * len(opts.topologies), desc="bench", unit="case")

    def on_case(done: int, total: int, label: str) -> None:
        bar.n = done
        bar.set_postfix_str(label)
        bar.refresh()

    try:
        cases = run_suite(opts, on_case)
    finally:
        bar.close()
    text = f"# tag bench{' --quick' if args.quick else ''}\n\n" + suite_markdown(cases)
    obj = suite_json(cases)
    failed = [c for c in cases if c.error]
    for c in failed:
        sys.stderr.write(f"tag bench: {c.model} on {c.topology} failed: {c.error}\n")
    return text, obj, 1 if failed else 0


def _published(args):
    from tag.bench.published import published_report
    from tag.bench.published_format import published_json, published_markdown

    log = (lambda _m: None) if args.json else (lambda m: sys.stderr.write(m + "\n"))
    rep = published_report(fit=args.fit, logo=args.logo, log=log)
    return "# Published GPU measurements vs tag's cost model\n\n" + published_markdown(rep), published_json(rep)
