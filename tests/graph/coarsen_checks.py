"""Helpers for the coarsening tests: hand-made OpGraphs and independent checks of a GroupGraph."""

from __future__ import annotations

import random

import networkx as nx

from tag.graph.opgraph import Op, OpGraph, TensorInfo


def make_graph(specs, batch_size=8, file_batch=1, params=(), data=("x",)):
    """An OpGraph from specs: (name, inputs, outputs, kwargs for Op). Tensors get shape (1, 4) float32
    (batched, 16 bytes per row) unless named in params (shape (4,), role param) or ending in '_shape'
    (int64 (2,), unbatched). Ops must be listed in a topological order."""
    ops, tensors = [], {}

    def tensor(name):
        if name not in tensors:
            if name in params:
                tensors[name] = TensorInfo(name, "float32", (4,), None, "param")
            elif name.endswith("_shape"):
                tensors[name] = TensorInfo(name, "int64", (2,), None, "constant")
            else:
                tensors[name] = TensorInfo(name, "float32", (file_batch, 4), 0,
                                           "data" if name in data else "activation")
        return tensors[name]

    for i, (name, ins, outs, kw) in enumerate(specs):
        kw = dict(kw)
        kw.setdefault("params", [t for t in ins if t in params])
        ops.append(Op(name=name, op_type=kw.pop("op_type", "Relu"), domain="", inputs=list(ins),
                      outputs=list(outs), **kw))
        for t in ins:
            tensor(t).consumers.append(i)
        for t in outs:
            tensor(t).producer = i
    return OpGraph(path="hand.onnx", ops=ops, tensors=tensors, data_inputs=list(data),
                   param_names=list(params), outputs=[specs[-1][2][0]], file_batch=file_batch,
                   batch_size=batch_size)


def random_dag_graph(seed: int, n: int, max_fanin: int = 3):
    """A random connected DAG model: op i reads the output of one to max_fanin earlier ops (op 0 reads x),
    with random FLOPs and saved bytes; a few ops take a parameter, and some are weight generators."""
    rng = random.Random(seed)
    specs, params = [], []
    for i in range(n):
        if i == 0:
            ins = ["x"]
        else:
            k = rng.randint(1, min(max_fanin, i))
            near = list(range(max(0, i - 6), i))
            srcs = sorted(set([i - 1] + rng.sample(near if len(near) >= k else list(range(i)), k - 1)))
            if rng.random() < 0.2:
                srcs = sorted(set(srcs) | {rng.randrange(i)})
            ins = [f"t{j}" for j in srcs]
        kw = {"fwd_flops_per_row": float(rng.randint(1, 100)), "saved_bytes_per_row": float(rng.randint(0, 64)),
              "bwd_flops_per_row": float(rng.randint(0, 200))}
        if rng.random() < 0.3:
            p = f"w{i}"
            params.append(p)
            specs.append((f"gen{i}", [], [p], {"is_weight_generator": True, "batched": False}))
            ins = ins + [p]
            kw["param_count"] = 4
            kw["param_bytes"] = 16.0
        specs.append((f"op{i}", ins, [f"t{i}"], kw))
    return make_graph(specs, params=params)


def check_group_graph(gg, k=None):
    """Assert the GroupGraph invariants, computed independently of coarsen: the groups partition the ops,
    each group is weakly connected in the op graph, the quotient graph (from every op->op tensor edge)
    is acyclic, groups are numbered in a topological order, and edges match the op graph."""
    graph = gg.graph
    seen = sorted(i for g in gg.groups for i in g.op_ids)
    assert seen == list(range(len(graph.ops))), "groups do not partition the ops"
    assert [g.id for g in gg.groups] == list(range(len(gg.groups)))
    if k is not None:
        assert len(gg.groups) == k
    gid = {i: g.id for g in gg.groups for i in g.op_ids}
    opg = nx.DiGraph()
    opg.add_nodes_from(range(len(graph.ops)))
    for t in graph.tensors.values():
        if t.producer is not None:
            for c in t.consumers:
                opg.add_edge(t.producer, c)
    q = nx.DiGraph()
    q.add_nodes_from(range(len(gg.groups)))
    for u, v in opg.edges:
        if gid[u] != gid[v]:
            q.add_edge(gid[u], gid[v])
            assert gid[u] < gid[v], "group ids are not a topological order"
    assert nx.is_directed_acyclic_graph(q)
    for g in gg.groups:
        assert nx.is_weakly_connected(opg.subgraph(g.op_ids)), f"group {g.id} is not connected"
        assert g.op_ids == sorted(g.op_ids)
    # every non-param activation edge of the quotient appears in gg.edges with its tensors
    expect = {}
    for t in graph.tensors.values():
        if t.producer is None or t.role == "param":
            continue
        for h in {gid[c] for c in t.consumers} - {gid[t.producer]}:
            expect.setdefault((gid[t.producer], h), set()).add(t.name)
    assert {(e.src, e.dst): set(e.tensors) for e in gg.edges} == expect
    return q


def branchy_graph(seed: int, n_blocks: int):
    """Inception-like: blocks of 2-5 parallel branches (1-4 ops each, random costs) joined by a Concat."""
    rng = random.Random(seed)
    specs, prev = [], "x"
    for b in range(n_blocks):
        outs = []
        for br in range(rng.randint(2, 5)):
            t = prev
            for j in range(rng.randint(1, 4)):
                name = f"b{b}_{br}_{j}"
                specs.append((name, [t], [name + "_o"], {"fwd_flops_per_row": float(rng.randint(1, 50)),
                                                         "saved_bytes_per_row": float(rng.randint(0, 32))}))
                t = name + "_o"
            outs.append(t)
        specs.append((f"cat{b}", outs, [f"cat{b}_o"], {"op_type": "Concat"}))
        prev = f"cat{b}_o"
    return make_graph(specs)
