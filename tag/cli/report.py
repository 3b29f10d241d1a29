"""`tag report PLAN.json MODEL [TOPOLOGY] -o report.html`: a self-contained HTML page showing a plan at a glance."""

from __future__ import annotations

from tag.cli.util import add_model_flags, add_output_flags, add_verb


def add_parser(sub):
    p = add_verb(sub, "report", "write a self-contained HTML report of a plan (cluster, placement, timeline, memory, "
                                "baselines)",
                 "tag report plan.json datasets/models/mlp.onnx datasets/topologies/cpu4.json -o report.html",
                 description="Write one self-contained HTML file (no network: inline SVG, CSS and a few lines of "
                             "script) that shows a plan: the cluster as a graph with the plan's traffic on every "
                             "link, the placement of op groups on devices, the simulated timeline per device, "
                             "memory per device against usable memory, the plan against every baseline, and how "
                             "the search found it. The plan is checked against MODEL and TOPOLOGY (default: the "
                             "plan's topology.path) as `tag simulate --plan` checks it. Identical devices and runs of "
                             "identical groups are aggregated, so the page stays readable up to 1,024 devices.")
    p.add_argument("plan", help="a plan written by `tag plan` (checked against MODEL and TOPOLOGY)")
    p.add_argument("model", help="the model .onnx")
    p.add_argument("topology", nargs="?", default=None,
                   help="the cluster topology .json (default: the plan's topology.path)")
    p.add_argument("-o", "--output", metavar="R.html", required=True, help="write the HTML report here")
    p.add_argument("--profile", metavar="F", default=None,
                   help="profile.json with measured op times (default: the one the plan records, else roofline)")
    add_model_flags(p)
    add_output_flags(p)
    return p


def run(args) -> int:
    from tag.cli.inputs import load_verb_inputs, plan_profile_default
    from tag.cli.util import check_outputs, emit
    from tag.deploy.job import topology_path_of
    from tag.report import gather, write_report
    from tag.strategy.planfile_read import load_plan_json

    args.topology = topology_path_of(args.plan, args.topology, "TOPOLOGY after MODEL")
    plan_profile_default(args, "report")
    check_outputs(args, {"output": "-o/--output"}, [args.plan, args.model, args.topology, args.profile])
    inp = load_verb_inputs(args, plan_path=args.plan)
    data = gather(inp, inp.strategy, load_plan_json(args.plan), plan_path=args.plan)
    size = write_report(args.output, data)
    res = data.result
    obj = {"report": args.output, "bytes": size, "iteration_ms": res.to_json()["iteration_ms"], "oom": res.oom,
           "devices": inp.cluster.n_devices, "baselines": {n: r.to_json()["iteration_ms"] for n, r in data.baselines.items()}}
    when = f"{res.iteration_ms:.1f} ms per iteration" if not res.oom else "out of memory"
    emit(args, obj, f"wrote {args.output} ({size / 1e3:,.0f} kB): plan {when} on {inp.cluster.n_devices} devices, "
                    f"{len(data.baselines)} baselines")
    return 0
