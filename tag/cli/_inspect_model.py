"""`tag inspect MODEL.onnx`: op graph summary (ops, params, FLOPs, shapes, batch) and the costliest ops."""

from __future__ import annotations

from tag.cli.util import emit, parse_input_shapes, table

TOP_OPS = 10


def model_summary(graph, groups: int | None) -> dict:
    """The `--json` object of `tag inspect MODEL.onnx` (DESIGN.md § Command line keys first)."""
    b = max(graph.batch_size, 1)
    fwd = sum(op.fwd_flops_per_row for op in graph.ops) + sum(op.fwd_flops_fixed for op in graph.ops) / b
    bwd = sum(op.bwd_flops_per_row for op in graph.ops) + sum(op.bwd_flops_fixed for op in graph.ops) / b
    return {
        "ops": len(graph.ops),
        "params": int(graph.param_count),
        "forward_flops_per_sample": int(round(fwd)),
        "unknown_shapes": sum(1 for t in graph.tensors.values() if t.shape is None),
        "groups": groups,
        "batch_size": int(graph.batch_size),
        "file_batch": int(graph.file_batch),
        "backward_flops_per_sample": int(round(bwd)),
        "param_bytes": int(graph.param_bytes),
        "data_inputs": list(graph.data_inputs),
        "input_shapes": {k: list(graph.tensors[k].shape or ()) for k in graph.data_inputs},
        "unsplittable_ops": sum(1 for op in graph.ops if op.batched and not op.splittable),
        "batch_constants": len(graph.batch_constants),
        "sha256": graph.sha256,
        "warnings": list(graph.warnings),
    }


def costliest_ops(graph, n: int = TOP_OPS) -> list[list]:
    """Rows (name, type, class, fwd MFLOP/sample, bwd MFLOP/sample, params, out KB/sample) of the n costliest ops."""
    b = max(graph.batch_size, 1)
    def fwd(op):
        return op.fwd_flops_per_row + op.fwd_flops_fixed / b
    ranked = sorted(range(len(graph.ops)), key=lambda i: (-fwd(graph.ops[i]), i))[:n]
    rows = []
    for i in ranked:
        op = graph.ops[i]
        rows.append([op.name, op.op_type, op.op_class, fwd(op) / 1e6, (op.bwd_flops_per_row + op.bwd_flops_fixed / b) / 1e6,
                     op.param_count, op.out_bytes_per_row / 1e3, op.splittable])
    return rows


def run_model(args) -> int:
    from tag.graph import load_model

    graph = load_model(args.path, data_inputs=tuple(args.data_input), input_shapes=parse_input_shapes(args.input_shape),
                       batch_size=args.batch_size, n_devices=args.devices)
    groups = None
    group_graph = None
    try:
        from tag.graph.coarsen import coarsen
    except ImportError:
        coarsen = None
    if coarsen is not None:
        group_graph = coarsen(graph, k=args.groups, n_devices=args.devices)
        groups = group_graph.n_groups
    s = model_summary(graph, groups)
    shapes = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in s["input_shapes"].items())
    lines = [
        f"model {args.path}: {s['ops']} ops, {s['params'] / 1e6:.2f} M params ({s['param_bytes'] / 1e6:.1f} MB), "
        f"{s['forward_flops_per_sample'] / 1e9:.3f} GFLOP forward per sample "
        f"({s['forward_flops_per_sample'] / 2e9:.3f} GMAC), {s['backward_flops_per_sample'] / 1e9:.3f} GFLOP backward",
        f"batch: {s['batch_size']} (file batch {s['file_batch']}); data inputs: {shapes}",
        f"unknown shapes: {s['unknown_shapes']}; ops that cannot split rows: {s['unsplittable_ops']}; "
        f"batch constants: {s['batch_constants']}; groups: {groups if groups is not None else '-'}",
    ]
    lines += [f"warning: {w}" for w in graph.warnings]
    lines += ["", f"costliest {min(TOP_OPS, len(graph.ops))} ops (per sample):",
              table(costliest_ops(graph), ["op", "type", "class", "fwd MFLOP", "bwd MFLOP", "params", "out KB", "splittable"])]
    if group_graph is not None and args.groups is not None:
        from tag.graph.coarsen_report import group_table, groups_json
        s["group_details"] = groups_json(group_graph)
        lines += ["", f"{group_graph.n_groups} op groups (per sample; preds = groups it reads from):",
                  table(*group_table(group_graph))]
    emit(args, s, "\n".join(lines))
    return 0
