"""The GNN's input: a heterogeneous graph as plain containers, and batching a list of them into one graph.

A `HeteroGraph` holds node stores by type name (`graph["group"].x` [N, F]), edge stores by (src, rel, dst) type
(`graph["device", "link", "device"].edge_index` [2, E] and `.edge_attr` [E, F_e]) and per-graph tensors whose
first axis is the graph: `u` [1, GLOBAL_DIM], `v_prior` [1], and the training targets `value` [1], `inst` [1].
Indexing a type that is not there yet creates its empty store (so `graph["cand"].x = ...` adds a node type).

Arrays are numpy or torch (`to_torch` converts). `batch_graphs` joins B graphs with the same node and edge types (in any order; the first graph's order is kept) into
one (disjoint union), as PyG's `Batch.from_data_list` does:

    nodes of type t:  x = cat over graphs (dim 0);  batch[k] = index of the graph node k came from   [N_total]
    edges of (s, r, t): edge_index = cat over graphs b of edge_index_b + [[n_s before b], [n_t before b]]
                        edge_attr = cat over graphs (dim 0)
    per-graph tensors:  cat over graphs (dim 0): u [B, GLOBAL_DIM], v_prior [B], value [B], inst [B]

where n_s before b is the number of type-s nodes in graphs 0..b-1. Example: two graphs with 2 and 3 "device"
nodes and a link edge 1 -> 0 in each give edge_index [[1, 3], [0, 2]] and batch [0, 0, 1, 1, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

Array = Any  # a numpy array (as `tag.gnn.data` builds graphs) or a torch.Tensor (after `to_torch`)
EdgeType = tuple  # (source node type, relation, destination node type)


@dataclass(slots=True)
class NodeStore:
    """Nodes of one type: features x [N, F]; `batch` [N] (graph of each node; only in a batch); `target` [N]
    (training target per node: a policy's visit distribution)."""
    x: Array | None = None
    batch: Array | None = None
    target: Array | None = None

    @property
    def num_nodes(self) -> int:
        return 0 if self.x is None else int(self.x.shape[0])


@dataclass(slots=True)
class EdgeStore:
    """Edges of one type: edge_index [2, E] (row 0 source, row 1 destination node indices), edge_attr [E, F_e]."""
    edge_index: Array | None = None
    edge_attr: Array | None = None


def edge_type_key(edge_type: EdgeType) -> str:
    """The module key of an edge type, as PyG's ModuleDict spells it: ("a", "r", "b") -> "<a___r___b>" (the
    convolutions' parameter names: `tag.gnn.layers.HeteroConv`, `tag.gnn.infer`)."""
    return f"<{'___'.join(edge_type)}>"


GRAPH_TENSORS = ("u", "v_prior", "value", "inst")  # per-graph tensors, batched along dim 0


@dataclass(slots=True)
class HeteroGraph:
    """Node stores by type, edge stores by (src, rel, dst), and per-graph tensors (see the module docstring)."""
    nodes: dict[str, NodeStore] = field(default_factory=dict)
    edges: dict[EdgeType, EdgeStore] = field(default_factory=dict)
    u: Array | None = None
    v_prior: Array | None = None
    value: Array | None = None
    inst: Array | None = None

    def __getitem__(self, key):
        """graph["t"] -> the NodeStore of node type t; graph["s", "r", "t"] -> the EdgeStore of that edge type
        (created empty when absent)."""
        if isinstance(key, str):
            return self.nodes.setdefault(key, NodeStore())
        if isinstance(key, tuple) and len(key) == 3 and all(isinstance(k, str) for k in key):
            return self.edges.setdefault(key, EdgeStore())
        raise KeyError(f"a node type (str) or an edge type (src, rel, dst), got {key!r}")


def _cat(parts: list, what: str, dim: int = 0):
    """torch.cat of `parts`, or None when every part is None (an error when only some are)."""
    import torch

    missing = [p is None for p in parts]
    if all(missing):
        return None
    if any(missing):
        raise ValueError(f"cannot batch graphs: {what} is set in some graphs and not in others")
    return torch.cat(parts, dim=dim)


def to_torch(graph: HeteroGraph) -> HeteroGraph:
    """The same graph with every numpy array as a torch tensor (`torch.from_numpy`: same dtype and values, memory
    shared); tensors and None stay as they are. The torch networks read graphs this way."""
    import torch

    def t(a):
        return torch.from_numpy(a) if isinstance(a, np.ndarray) else a

    out = HeteroGraph()
    for name, st in graph.nodes.items():
        out.nodes[name] = NodeStore(x=t(st.x), batch=t(st.batch), target=t(st.target))
    for et, st in graph.edges.items():
        out.edges[et] = EdgeStore(edge_index=t(st.edge_index), edge_attr=t(st.edge_attr))
    for name in GRAPH_TENSORS:
        setattr(out, name, t(getattr(graph, name)))
    return out


def batch_graphs(graphs: Sequence[HeteroGraph]) -> HeteroGraph:
    """The disjoint union of `graphs` (same node and edge types in each), with node indices offset and a `batch`
    vector per node type (formulas in the module docstring)."""
    import torch

    if not graphs:
        raise ValueError("cannot batch an empty list of graphs")
    graphs = [to_torch(g) for g in graphs]
    node_types, edge_types = list(graphs[0].nodes), list(graphs[0].edges)
    for g in graphs:
        if set(g.nodes) != set(node_types) or set(g.edges) != set(edge_types):
            raise ValueError(f"cannot batch graphs of different types: {node_types} / {edge_types} against "
                             f"{list(g.nodes)} / {list(g.edges)}")
        if any(s.batch is not None for s in g.nodes.values()):
            raise ValueError("cannot batch graphs that are batches already")
    out = HeteroGraph()
    counts = {t: torch.tensor([g.nodes[t].num_nodes for g in graphs]) for t in node_types}
    starts = {t: torch.cumsum(c, 0) - c for t, c in counts.items()}
    for t in node_types:
        out.nodes[t] = NodeStore(
            x=_cat([g.nodes[t].x for g in graphs], f"{t}.x"),
            batch=torch.repeat_interleave(torch.arange(len(graphs)), counts[t]),
            target=_cat([g.nodes[t].target for g in graphs], f"{t}.target"))
    for et in edge_types:
        s, _, t = et
        index = [None if g.edges[et].edge_index is None
                 else g.edges[et].edge_index + torch.stack([starts[s][b], starts[t][b]]).view(2, 1)
                 for b, g in enumerate(graphs)]
        out.edges[et] = EdgeStore(edge_index=_cat(index, f"{et}.edge_index", dim=1),
                                  edge_attr=_cat([g.edges[et].edge_attr for g in graphs], f"{et}.edge_attr"))
    for name in GRAPH_TENSORS:
        setattr(out, name, _cat([getattr(g, name) for g in graphs], name))
    return out
