"""SFB on transformer Linears (Transpose(W) -> MatMul on [batch, seq, K]), W X products and embedding
Gathers, deployed on 3 gloo ranks, equals single-process full-batch training (losses and parameters, rtol 1e-4).

One spawn runs a hand-built graph (an embedding Gather, Linear as Transpose->MatMul with a bias, a left
product W X, a left product through Transpose(W)) and bert_tiny through the ONNX converter with SFB on
every op `eligible_ops` offers (attention and MLP Linears, 32 factor rows per sequence, the pooler Gemm
and the word embedding).
The reference is `_deploy_harness.reference_training` (plain torch.optim on the whole batch).
"""

from __future__ import annotations

import os

import torch

from _deploy_harness import assert_ranks_match_reference, reference_training, run_scenarios
from tag.deploy.data import synthetic_batch
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.strategy import Decision, Strategy

B, S = 9, 3
MACHINES = ["m0", "m0", "m1"]
MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models")

# name, op_type, inputs, outputs, attrs; parameters per op (roots, as tag.graph.load records them)
LIN_OPS = [
    ("emb", "Gather", ["E", "ids"], ["e"], {"axis": 0}, ["E"]),  # embedding: E [10, 8] at ids [B, 3]
    ("ax", "Add", ["x", "e"], ["xe"], {}, []),
    ("t1", "Transpose", ["W1"], ["W1t"], {"perm": [1, 0]}, []),
    ("m1", "MatMul", ["xe", "W1t"], ["h1"], {}, ["W1"]),  # Linear: [B, 3, 8] @ W1^T -> [B, 3, 16]
    ("a1", "Add", ["h1", "b1"], ["h1b"], {}, ["b1"]),
    ("th", "Tanh", ["h1b"], ["a1"], {}, []),
    ("tp", "Transpose", ["a1"], ["a1t"], {"perm": [0, 2, 1]}, []),
    ("m2", "MatMul", ["W2", "a1t"], ["h2"], {}, ["W2"]),  # left: W2 [4, 16] @ [B, 16, 3] -> [B, 4, 3]
    ("t3", "Transpose", ["W3"], ["W3t"], {"perm": [1, 0]}, []),
    ("m3", "MatMul", ["W3t", "h2"], ["y"], {}, ["W3"]),  # left through Transpose: W3^T [6, 4] @ [B, 4, 3]
]
LIN_PARAMS = {"E": (10, 8), "W1": (16, 8), "b1": (16,), "W2": (4, 16), "W3": (4, 6)}
LIN_ACTS = {"x": (S, 8), "e": (S, 8), "xe": (S, 8), "h1": (S, 16), "h1b": (S, 16), "a1": (S, 16), "a1t": (16, S), "h2": (4, S), "y": (6, S)}
LIN_GROUPS = [[0, 1, 2, 3, 4, 5], [6, 7], [8, 9]]
LIN_PLAN = Strategy((Decision((4, 2, 3), "ring", None, ("emb", "m1")), Decision((3, 3, 3), "ring", None, ("m2",)),
                     Decision((5, 0, 4), "ring", None, ("m3",))))


def lin_graph(batch: int) -> OpGraph:
    tensors = {n: TensorInfo(n, "float32", s, None, "param") for n, s in LIN_PARAMS.items()}
    for n, s in LIN_ACTS.items():
        tensors[n] = TensorInfo(n, "float32", (1,) + s, 0, "data" if n == "x" else "activation")
    tensors["ids"] = TensorInfo("ids", "int64", (1, S), 0, "data")
    tensors["W1t"] = TensorInfo("W1t", "float32", (8, 16), None, "param")
    tensors["W3t"] = TensorInfo("W3t", "float32", (6, 4), None, "param")
    ops = []
    for i, (name, typ, ins, outs, attrs, prm) in enumerate(LIN_OPS):
        ops.append(Op(name, typ, "", list(ins), list(outs), params=list(prm), attrs=dict(attrs),
                      is_weight_generator=name in ("t1", "t3")))
        for t in ins:
            tensors[t].consumers.append(i)
        for t in outs:
            tensors[t].producer = i
    return OpGraph("lin", ops, tensors, ["x", "ids"], list(LIN_PARAMS), ["y"], 1, batch)


class LinProgram:
    """run_ops/param/param_names over `lin_graph` with plain torch, parameters seeded."""

    def __init__(self, graph: OpGraph, seed: int = 0):
        self.graph = graph
        gen = torch.Generator().manual_seed(seed)
        self._params = {n: (0.4 * torch.randn(s, generator=gen)).requires_grad_(True) for n, s in LIN_PARAMS.items()}
        self.param_names = list(LIN_PARAMS)

    def param(self, name: str) -> torch.Tensor:
        return self._params[name]

    def run_ops(self, op_ids, env, rows):
        for i in op_ids:
            op = self.graph.ops[i]
            a = [env[t] if t in env else self._params[t] for t in op.inputs]
            y = {"MatMul": lambda: torch.matmul(a[0], a[1]), "Add": lambda: a[0] + a[1], "Gather": lambda: a[0][a[1]],
                 "Tanh": lambda: torch.tanh(a[0]), "Transpose": lambda: a[0].permute(*op.attrs["perm"])}[op.op_type]()
            env[op.outputs[0]] = y
        return env


def _bert():
    import onnx

    from tag.compression import eligible_ops, with_sfb
    from tag.deploy.onnx_torch import TorchProgram
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    path = os.path.join(MODELS, "bert_tiny.onnx")
    graph = load_model(path, batch_size=8)
    gg = coarsen(graph, k=3, n_devices=3)
    rows = [(3, 2, 3), (2, 4, 2), (4, 0, 4)]
    plain = Strategy(tuple(Decision(rows[g % 3], "ring" if grp.param_bytes > 0 else None)
                           for g, grp in enumerate(gg.groups)))
    plan = with_sfb(plain, eligible_ops(gg, plain))
    return graph, TorchProgram(onnx.load(path), graph, seed=0), [list(g.op_ids) for g in gg.groups], plan


def make(sc):
    if sc["model"] == "bert_tiny":
        graph, program, groups, _ = _bert()
        return graph, program, groups
    graph = lin_graph(B)
    return graph, LinProgram(graph, seed=0), LIN_GROUPS


def test_lin_schedule_takes_weights_out_of_the_ring_sum():
    from tag.deploy.schedule import build_schedule

    sched = build_schedule(lin_graph(B), LIN_GROUPS, LIN_PLAN, MACHINES)
    got = {(o.param, o.side, o.trans, o.x_input, o.ranks) for o in sched.sfb}
    assert got == {("E", "gather", False, 1, (0, 1, 2)), ("W1", "right", True, 0, (0, 1, 2)), ("W2", "left", False, 1, (0, 1, 2)),
                   ("W3", "left", True, 1, (0, 2))}
    assert [b.params for b in sched.buckets] == [("b1",)]


def test_sfb_linear_three_ranks_equal_single_process(tmp_path):
    bert_graph, _, bert_groups, bert_plan = _bert()
    sfb_ops = [n for d in bert_plan.decisions for n in d.sfb]
    linears = [n for n in sfb_ops if n.startswith("node_MatMul")]
    ops = {o.name: o for o in bert_graph.ops}
    # every Linear of both layers, the pooler Gemm and the word embedding (the position and token-type
    # tables are gathered at constant indices: their rows are not per-row factors)
    assert len(linears) == 12 and sorted(ops[n].op_type for n in sfb_ops if n not in linears) == ["Gather", "Gemm"]
    from tag.deploy.schedule import build_schedule

    sched = build_schedule(bert_graph, bert_groups, bert_plan, MACHINES)
    assert len(sched.sfb) == 14 and not {o.param for o in sched.sfb} & {p for b in sched.buckets for p in b.params}
    scenarios = [
        {"name": "lin-sgd", "model": "lin", "strategy": LIN_PLAN, "machines": MACHINES, "steps": 3,
         "optimizer": "sgd", "lr": 0.05},
        {"name": "lin-adam", "model": "lin", "strategy": LIN_PLAN, "machines": MACHINES, "steps": 3,
         "optimizer": "adam", "lr": 0.01},
        {"name": "bert-sgd", "model": "bert_tiny", "strategy": bert_plan, "machines": MACHINES, "steps": 3,
         "optimizer": "sgd", "lr": 0.05},
    ]
    results = run_scenarios(3, scenarios, make, str(tmp_path))
    for sc in scenarios:
        graph, program, _ = make(sc)
        data, targets = synthetic_batch(graph, graph.batch_size, 0)
        ref_losses, ref_params = reference_training(graph, program, data, targets, sc["steps"], sc["optimizer"],
                                                    sc["lr"])
        assert ref_losses[-1] < ref_losses[0], sc["name"]
        assert_ranks_match_reference(results[sc["name"]], ref_losses, ref_params, sc["name"])
