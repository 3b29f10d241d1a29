"""Node order: the *stable* topological sort that the graph loader and the deploy converter share.

Kahn's algorithm that always emits the ready node with the smallest index in the file, so a file already in
topological order keeps its order exactly, and sorting twice changes nothing. ONNX requires files to be
sorted, but real files are not always; both consumers use this one rule so their op orders agree.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Mapping, Sequence

import onnx

from tag.errors import InputError


def _node_list(model_or_nodes) -> Sequence[onnx.NodeProto]:
    if isinstance(model_or_nodes, onnx.ModelProto):
        return model_or_nodes.graph.node
    if isinstance(model_or_nodes, onnx.GraphProto):
        return model_or_nodes.node
    return model_or_nodes


def kahn_order(nodes: Iterable[int], succ: Mapping[int, Iterable[int]]) -> list[int]:
    """Kahn's topological order of integer `nodes`, always emitting the smallest ready one first.

    succ[p] lists the successors of p (each edge once). On a cycle the result is shorter than `nodes`: the
    nodes on or behind a cycle are left out.

    >>> kahn_order([0, 1, 2], {0: [], 1: [0], 2: [0]})
    [1, 2, 0]
    """
    nodes = list(nodes)
    indeg = {p: 0 for p in nodes}
    for p in nodes:
        for q in succ[p]:
            indeg[q] += 1
    ready = [p for p in nodes if indeg[p] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        p = heapq.heappop(ready)
        order.append(p)
        for q in succ[p]:
            indeg[q] -= 1
            if indeg[q] == 0:
                heapq.heappush(ready, q)
    return order


def stable_topological_order(model_or_nodes, path: str = "<model>") -> list[int]:
    """Indices of the nodes in stable topological order (smallest file index first among the ready nodes).

    `model_or_nodes`: a ModelProto, a GraphProto or a sequence of NodeProto. A node depends on the producer of
    each of its inputs (names no node produces are graph inputs or initializers). Raises
    InputError(path, "node 'name' (OpType)", "an acyclic graph", ...) on a cycle.

    >>> from onnx import helper
    >>> a = helper.make_node("Relu", ["y"], ["z"], name="a")
    >>> b = helper.make_node("Relu", ["x"], ["y"], name="b")
    >>> stable_topological_order([a, b])
    [1, 0]
    """
    nodes = _node_list(model_or_nodes)
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    deps = [set() for _ in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for name in n.input:
            p = producer.get(name)
            if name and p is not None and p != i and p not in deps[i]:
                deps[i].add(p)
                users[p].append(i)
    order = kahn_order(range(len(nodes)), dict(enumerate(users)))
    if len(order) != len(nodes):
        stuck = min(set(range(len(nodes))) - set(order))
        raise InputError(path, f"node '{nodes[stuck].name or f'{nodes[stuck].op_type}_{stuck}'}' ({nodes[stuck].op_type})",
                         "an acyclic graph", "a cycle through this node")
    return order


def sort_graph_nodes(graph: onnx.GraphProto, path: str = "<model>") -> bool:
    """Reorder `graph.node` in place into stable topological order; True if the order changed."""
    order = stable_topological_order(graph, path)
    if order == list(range(len(order))):
        return False
    nodes = [graph.node[i] for i in order]
    copies = [onnx.NodeProto() for _ in nodes]
    for c, n in zip(copies, nodes):
        c.CopyFrom(n)
    del graph.node[:]
    graph.node.extend(copies)
    return True
