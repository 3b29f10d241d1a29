"""Every op `eligible_ops` offers is one the deploy runtime accepts as SFB (its schedule builds), on real models."""

from __future__ import annotations

import os

import pytest

from tag.compression import eligible_ops, with_sfb
from tag.deploy.schedule import build_schedule
from tag.graph import load_model
from tag.graph.coarsen import coarsen
from tag.graph.groups import GroupGraph
from tag.strategy import Decision, Strategy

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models")


@pytest.mark.parametrize("name", ["mlp", "gpt2_tiny", "dlrm_tiny", "bert_tiny", "small_transformer"])
def test_eligible_ops_deploy(name):
    graph = load_model(os.path.join(MODELS, f"{name}.onnx"), batch_size=8)
    gg: GroupGraph = coarsen(graph, k=4, n_devices=2)
    plain = Strategy(tuple(Decision((4, 4), "allreduce" if g.param_bytes > 0 else None) for g in gg.groups))
    cands = eligible_ops(gg, plain)
    gemms = [op for op in graph.ops if op.op_type in ("Gemm", "MatMul") and len(op.inputs) > 1
             and graph.tensors.get(op.inputs[1]) is not None and graph.tensors[op.inputs[1]].role == "param"]
    if name == "mlp":
        assert len(cands) == len(gemms) > 0  # every Gemm of the MLP has its own weight
    if name in ("bert_tiny", "small_transformer"):  # every Linear (Transpose->MatMul) and the word embedding
        linears = [op.name for op in graph.ops if op.op_type == "MatMul" and graph.tensors[op.inputs[1]].producer
                   is not None and graph.ops[graph.tensors[op.inputs[1]].producer].op_type == "Transpose"
                   and graph.tensors[op.inputs[1]].role == "param"]
        names = {c.op_name for c in cands}
        assert len(linears) == 12 and set(linears) <= names
        assert any(graph.ops[c.factors.op_index].op_type == "Gather" for c in cands)
    s = with_sfb(plain, cands)
    sched = build_schedule(graph, [list(g.op_ids) for g in gg.groups], s, ["m0", "m1"])
    assert sorted(graph.ops[o.op_id].name for o in sched.sfb) == sorted(c.op_name for c in cands)
    sfb_params = {o.param for o in sched.sfb}
    assert not any(p in sfb_params for b in sched.buckets for p in b.params)  # weights left the all-reduce
