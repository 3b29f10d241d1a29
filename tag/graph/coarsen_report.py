"""Group summaries for `tag inspect MODEL --groups K`: JSON-ready dicts and a table (plain data, no printing).

>>> # rows, headers = group_table(gg); print(tag.textfmt.table(rows, headers))
"""

from __future__ import annotations

from tag.graph.groups import GroupGraph

TABLE_HEADERS = ["group", "ops", "first op", "last op", "split", "fwd GFLOP/row", "params MB",
                 "saved MB/row", "out KB/row", "preds"]


def groups_json(gg: GroupGraph) -> list[dict]:
    """One dict per group: id, op count and names, splittable, FLOPs per row and fixed, parameter count and
    bytes, saved and outgoing bytes per row, predecessor group ids, owned and shared parameter names."""
    ops = gg.graph.ops
    preds: dict[int, list[int]] = {g.id: [] for g in gg.groups}
    for e in gg.edges:
        preds[e.dst].append(e.src)
    shared_by: dict[int, list[str]] = {}
    for p, users in gg.shared_params.items():
        for u in users[1:]:
            shared_by.setdefault(u, []).append(p)
    return [{
        "id": g.id, "n_ops": len(g.op_ids), "ops": [ops[i].name for i in g.op_ids], "splittable": g.splittable,
        "fwd_flops_per_row": g.fwd_flops_per_row, "fwd_flops_fixed": g.fwd_flops_fixed,
        "bwd_flops_per_row": g.bwd_flops_per_row, "bwd_flops_fixed": g.bwd_flops_fixed,
        "param_count": g.param_count, "param_bytes": g.param_bytes,
        "saved_bytes_per_row": g.saved_bytes_per_row, "saved_bytes_fixed": g.saved_bytes_fixed,
        "out_bytes_per_row": g.out_bytes_per_row, "preds": sorted(preds[g.id]),
        "params": list(g.params), "shared_params_used": sorted(shared_by.get(g.id, [])),
    } for g in gg.groups]


def group_table(gg: GroupGraph, name_width: int = 28) -> tuple[list[list], list[str]]:
    """Rows and headers of the human group table (figures in GFLOP, 10^6 bytes and 10^3 bytes)."""
    ops = gg.graph.ops

    def short(name: str) -> str:
        return name if len(name) <= name_width else "..." + name[-(name_width - 3):]

    rows = []
    for d, g in zip(groups_json(gg), gg.groups):
        rows.append([g.id, len(g.op_ids), short(ops[g.op_ids[0]].name), short(ops[g.op_ids[-1]].name),
                     "yes" if g.splittable else "no", f"{g.fwd_flops_per_row / 1e9:.3f}",
                     f"{g.param_bytes / 1e6:.2f}", f"{g.saved_bytes_per_row / 1e6:.3f}",
                     f"{g.out_bytes_per_row / 1e3:.1f}", ",".join(map(str, d["preds"])) or "-"])
    return rows, TABLE_HEADERS
