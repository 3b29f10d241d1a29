"""`tag simulate MODEL TOPOLOGY (--plan P.json | --baseline NAME)`: one simulated training iteration."""

from __future__ import annotations

from tag.cli.util import BASELINE_NAMES, add_model_flags, add_output_flags, add_precision_flag, add_verb


def add_parser(sub):
    p = add_verb(sub, "simulate", "simulate one training iteration of a plan or a baseline",
                 "tag simulate datasets/models/resnet50.onnx datasets/topologies/heterog8.json --baseline dp-even\n"
                 "  tag simulate model.onnx topo.json --plan plan.json --trace trace.json --json",
                 description="Simulate one training iteration of a plan or a baseline. With --plan, the plan is "
                             "checked against MODEL and TOPOLOGY (hashes, op names, device ids, rows, sync) and "
                             "its batch, input shapes, optimizer and op groups are used.")
    p.add_argument("model", help="the model .onnx")
    p.add_argument("topology", help="the cluster topology .json")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--plan", metavar="P.json", help="a plan written by `tag plan` (checked against MODEL and TOPOLOGY)")
    which.add_argument("--baseline", choices=BASELINE_NAMES, metavar="NAME",
                       help="a baseline strategy: " + ", ".join(BASELINE_NAMES))
    p.add_argument("--profile", metavar="F", default=None,
                   help="profile.json with measured op times (default: the one a --plan records, else roofline)")
    p.add_argument("--trace", metavar="T.json", default=None, help="write a Chrome trace (chrome://tracing, Perfetto)")
    p.add_argument("--groups", type=int, default=None, metavar="K", help="op groups for baselines (default: automatic)")
    add_model_flags(p)
    add_precision_flag(p, "with --plan the plan's precision (--precision must agree with it), else fp32")
    add_output_flags(p)
    return p


def _per_device(value, cluster) -> dict:
    """A per-device figure (dict by device id, or a sequence in topology order) as a dict by device id."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    return {d.id: float(v) for d, v in zip(cluster.devices, value)}


def merge_equal_rows(rows: list[list]) -> list[list]:
    """Merge runs of consecutive device rows whose other columns are exactly equal into one row whose first cell
    spans the ids, e.g. 'm0/0 … m63/7 (512)': a 512-device cluster of one kind prints one line, not 512."""
    out: list[list] = []
    span: list[str] = []
    for r in rows:
        if out and out[-1][1:] == r[1:]:
            span.append(r[0])
        else:
            if span:
                out[-1][0] = _span(span)
            out.append(list(r))
            span = [r[0]]
    if span:
        out[-1][0] = _span(span)
    return out


def _span(ids: list[str]) -> str:
    if len(ids) == 1:
        return ids[0]
    if len(ids) == 2:
        return f"{ids[0]}, {ids[1]}"
    return f"{ids[0]} … {ids[-1]} ({len(ids)})"


def run(args) -> int:
    from tag.cli.util import check_outputs, emit, table
    from tag.cli.inputs import load_verb_inputs, plan_profile_default
    from tag.search.baselines import build_baseline
    from tag.sim import simulate

    if args.plan and args.groups is not None:
        from tag.errors import InputError

        raise InputError("--groups", "K", "no --groups with --plan (the plan's own groups are simulated)", str(args.groups))
    plan_profile_default(args, "simulate")
    check_outputs(args, {"trace": "--trace"}, [args.model, args.topology, args.plan, args.profile])
    inp = load_verb_inputs(args, plan_path=args.plan)
    if args.plan:
        strategy, source = inp.strategy, f"plan {args.plan}"
    else:
        strategy, source = build_baseline(args.baseline, inp.gg, inp.cluster, inp.cost, inp.training), f"baseline {args.baseline}"
    res = simulate(inp.gg, inp.cluster, inp.cost, strategy, inp.training, trace=bool(args.trace))
    if args.trace:
        from tag.sim import write_chrome_trace

        write_chrome_trace(res, args.trace)

    obj = dict(res.to_json())
    obj.update({"batch_size": inp.batch_size, "groups": inp.gg.n_groups, "cost_model": inp.cost.name,
                "precision": inp.training.precision,
                "strategy": "plan" if args.plan else args.baseline})
    if args.trace:
        obj["trace"] = args.trace
    for key in ("iteration_ms", "samples_per_s", "oom", "oom_devices", "peak_memory_gb"):
        if key not in obj:  # DESIGN.md minimum keys, from the result's attributes if to_json left one out
            obj[key] = getattr(res, key)

    as_run = None
    if getattr(inp.cost, "contention", None) is not None:  # a profile with its contention block (docs/profile.md)
        from tag.cli._as_deployed import as_deployed_step

        as_run, missing = as_deployed_step(inp, strategy, inp.cluster.n_devices, args.topology)
        obj["as_deployed"] = {"step_ms": as_run.step_ms, "compute_scale": as_run.scale,
                              "concurrency": as_run.concurrency, "ranks": inp.cluster.n_devices, "without": missing}

    busy = _per_device(getattr(res, "busy_ms", None), inp.cluster)
    peak = _per_device(res.peak_memory_gb, inp.cluster)
    oom_devices = set(res.oom_devices or [])
    rows_of = {}
    for dec in strategy.decisions:
        for d in dec.devices:
            rows_of[d] = max(rows_of.get(d, 0), dec.rows[d])
    lines = [f"{source}: {inp.gg.n_groups} groups, batch {inp.batch_size}, optimizer {inp.training.optimizer}, "
             f"precision {inp.training.precision}, cost model {inp.cost.name}",
             (f"OUT OF MEMORY on {', '.join(sorted(oom_devices))} (the iteration would take "
              f"{getattr(res, 'fit_iteration_ms', float('nan')):.2f} ms if it fit)" if res.oom else
              f"iteration {res.iteration_ms:.2f} ms, {res.samples_per_s:,.1f} samples/s")]
    if as_run is not None:
        lines.append(f"as tag deploy runs it on {inp.cluster.n_devices} ranks of this machine: {as_run.step_ms:.2f} ms "
                     f"(the profile's contention terms: compute x{as_run.scale:.3f} at concurrency "
                     f"{as_run.concurrency:.2f}; blocking exchanges"
                     + ("" if as_run.overlap_sync else "; bucket sums after the backward: the ranks fill the cores")
                     + (f"; without {', '.join(missing)})" if missing else ")"))
    lines.append("")
    rows = []
    for d in inp.cluster.devices:
        usable_gb = d.type.usable_memory_bytes / 1e9
        rows.append([d.id, d.type.name, rows_of.get(d.index, 0), busy.get(d.id, 0.0), peak.get(d.id, 0.0),
                     usable_gb, d.id in oom_devices])
    lines.append(table(merge_equal_rows(rows), ["device", "type", "max rows", "busy ms", "peak GB", "usable GB", "oom"]))
    if args.trace:
        lines.append(f"\ntrace written to {args.trace}")
    emit(args, obj, "\n".join(lines))
    return 0
