"""Rebuild a GroupGraph from explicit op-name groups (the groups stored in a plan).

A plan's groups are the truth at deploy and simulate time: the partition is rebuilt from the op names
the plan lists, never re-coarsened. Group figures are the sums of the ops' figures (like the coarsener);
an edge carries every tensor produced in one group and consumed in another.
"""

from __future__ import annotations

from tag.graph.groups import GroupGraph
from tag.graph.opgraph import OpGraph


def groupgraph_from_partition(graph: OpGraph, op_groups: list[list[int]]) -> GroupGraph:
    """The GroupGraph whose group i holds the ops with indices `op_groups[i]`.

    The figures come from the coarsener's `build_group_graph` (one place for the sums), with every op
    its own atom. The caller checks the partition first with `partition_problems`: every op in
    exactly one group, groups in a topological order of the quotient graph.
    """
    from tag.graph.coarsen import build_group_graph

    return build_group_graph(graph, list(range(len(graph.ops))), [sorted(ops) for ops in op_groups])


def partition_problems(graph: OpGraph, op_groups: list[list[int]]) -> list[tuple[str, str, str]]:
    """What is wrong with a partition of the graph's ops into ordered groups, as (where, expected, found).

    Checks: every op in exactly one group, no empty group, and every producer-consumer edge between
    groups goes forward (group order is a topological order, so the quotient graph is acyclic).
    An empty list means the partition is usable by `groupgraph_from_partition`.
    """
    problems: list[tuple[str, str, str]] = []
    seen: dict[int, int] = {}
    for g, ops in enumerate(op_groups):
        if not ops:
            problems.append((f"groups[{g}].ops", "a non-empty list of op names", "[]"))
        for i in ops:
            if i in seen:
                problems.append((f"groups[{g}].ops", "each op in exactly one group",
                                 f"{graph.ops[i].name!r} also in groups[{seen[i]}]"))
            seen[i] = g
    missing = [op.name for i, op in enumerate(graph.ops) if i not in seen]
    if missing:
        problems.append(("groups", f"every op of the model in a group ({len(graph.ops)} ops)",
                         f"{len(missing)} missing, e.g. {missing[0]!r}"))
        return problems
    for i, op in enumerate(graph.ops):
        for t in op.outputs:
            info = graph.tensors.get(t)
            for c in (info.consumers if info else []):
                if seen[c] < seen[i]:
                    problems.append((f"groups[{seen[c]}]",
                                     "groups in a topological order (producers in earlier groups)",
                                     f"op {graph.ops[c].name!r} consumes {t!r} from later groups[{seen[i]}]"))
                    return problems
    return problems


def groupgraph_from_plan(graph: OpGraph, plan_groups: list[list[str]], path: str = "plan.json") -> GroupGraph:
    """The GroupGraph of a plan's groups given by op names (``PlanMeta.groups``).

    Raises InputError(path, ``groups[g].ops[k]`` or ``groups[g]``, ...) for an unknown op name or a
    partition that `partition_problems` rejects.
    """
    from tag.errors import InputError, short_repr

    index = graph.op_index()
    op_groups = []
    for g, names in enumerate(plan_groups):
        ids = []
        for k, name in enumerate(names):
            if name not in index:
                raise InputError(path, f"groups[{g}].ops[{k}]", f"an op name of {graph.path}", short_repr(name))
            ids.append(index[name])
        op_groups.append(ids)
    for where, expected, found in partition_problems(graph, op_groups):
        raise InputError(path, where, expected, found)
    return groupgraph_from_partition(graph, op_groups)
