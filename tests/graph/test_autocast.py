"""tag.graph.autocast: tensor dtypes under bf16 autocast, by hand on small graphs and against torch.autocast running
the deploy converters; group_held_bytes under autocast against the storages autograd really saves."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tag.deploy.onnx_torch import TorchProgram
from tag.graph.autocast import autocast_dtypes, promote
from tag.graph.coarsen import coarsen
from tag.graph.costs import group_held_bytes
from tag.graph.load import load_model

from helpers_graph import F, save, w

ROWS = 4


def _mlp(tmp_path):
    """x[?,8] -> Gemm(W1 8x16, b1, transB) -> Relu -> MatMul(W2 16x4) -> Div(scalar c) -> y."""
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["m"]),
             helper.make_node("Div", ["m", "c"], ["y"])]
    inits = [("w1", w(16, 8)), ("b1", w(16)), ("w2", w(16, 4, seed=1)), ("c", np.array(2.0, np.float32))]
    return save(tmp_path, nodes, [("x", F, ["n", 8])], [("y", F, ["n", 4])], inits)


def test_dtypes_by_hand(tmp_path):
    g = load_model(_mlp(tmp_path))
    dt = autocast_dtypes(g, "bf16")
    # Gemm: bf16 product + fp32 bias vector -> fp32; Relu keeps fp32; MatMul bf16; bf16 / fp32 0-dim constant: bf16
    assert [dt.produced[t] for t in ("h", "r", "m", "y")] == ["float32", "float32", "bfloat16", "bfloat16"]
    assert dt.produced["x"] == "float32" and dt.produced["w1"] == "float32"
    assert autocast_dtypes(g, "fp16").produced["m"] == "float16"
    assert all(autocast_dtypes(g, p).produced[t] == "float32" for p in ("fp32", "tf32") for t in ("h", "m", "y"))
    # with groups: an op reads a float activation of another group as the 16-bit leaf deploy casts it to
    dt2 = autocast_dtypes(g, "bf16", groups=[[0], [1, 2, 3]])
    assert dt2.seen(g, 1, "h") == "bfloat16" and dt2.produced["h"] == "float32"
    assert dt2.produced["r"] == "bfloat16"  # Relu of a bf16 leaf


def test_promote_rules():
    assert promote([(1, "bfloat16"), (1, "float16")]) == "float32"
    assert promote([(0, "float32"), (0, "bfloat16")]) == "float32"
    assert promote([(2, "int64"), (0, "float32")]) == "float32"  # a float 0-dim beats dimensioned ints
    assert promote([(2, "int64")]) is None


def _run(program, g, op_ids, env, rows):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return program.run_ops(op_ids, env, rows)


def _inputs(g, rows, seed=0):
    gen = torch.Generator().manual_seed(seed)
    env = {}
    for t in g.data_inputs:
        info = g.tensors[t]
        shape = list(info.shape)
        shape[info.batch_axis or 0] = shape[info.batch_axis or 0] // max(g.file_batch, 1) * rows
        env[t] = torch.randn(shape, generator=gen) if info.dtype.startswith("float") else torch.zeros(shape,
                                                                                                      dtype=torch.long)
    return env


@pytest.mark.parametrize("model", ["mlp", "small_cnn", "small_transformer"])
def test_dtypes_match_torch_autocast(model):
    """Whole graph under torch.autocast(cpu, bf16) with the deploy converters: every tensor's dtype as predicted."""
    path = f"datasets/models/{model}.onnx"
    g = load_model(path)
    program = TorchProgram(onnx.load(path), g, seed=0)
    out = _run(program, g, range(len(g.ops)), _inputs(g, ROWS), ROWS)
    dt = autocast_dtypes(g, "bf16")
    got = {t: str(v.dtype).replace("torch.", "") for t, v in out.items() if isinstance(v, torch.Tensor)}
    assert {t: dt.produced[t] for t in got} == got


def _group_run(program, g, groups, k, produced, rows, saved):
    """Run group k of `groups` as deploy does: inputs from other groups detached and cast to bf16 leaves; returns
    (outputs, the leaves that are new copies). Storages autograd saves land in `saved` (id -> nbytes)."""
    env = _inputs(g, rows)
    mine = set(groups[k])
    leaves = {}
    for i in groups[k]:
        for n in g.ops[i].inputs:
            t = g.tensors.get(n)
            if t is None or t.role != "activation" or t.producer in mine or n in env:
                continue
            x = produced[n].detach()
            if x.is_floating_point():
                x = x.to(torch.bfloat16).requires_grad_(True)
            env[n] = x
            if x.untyped_storage().data_ptr() != produced[n].untyped_storage().data_ptr():
                leaves[n] = x

    def pack(t):
        st = t.untyped_storage()
        saved[st.data_ptr()] = (st.nbytes(), t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _run(program, g, groups[k], env, rows)
    return out, leaves


@pytest.mark.parametrize("model,k", [("mlp", 5), ("small_cnn", 6), ("small_transformer", 6)])
def test_held_bytes_match_saved_storages(model, k):
    """Per group under bf16: group_held_bytes(dtypes) = the distinct storages autograd saves (weights and data
    excluded), plus the group's outputs and its 16-bit input leaves, measured at 2 row counts (per row and fixed)."""
    path = f"datasets/models/{model}.onnx"
    g = load_model(path)
    gg = coarsen(g, k)
    groups = [grp.op_ids for grp in gg.groups]
    dt = autocast_dtypes(g, "bf16", groups=groups)
    program = TorchProgram(onnx.load(path), g, seed=0)
    outs_of = {grp.id: set() for grp in gg.groups}
    for e in gg.edges:
        outs_of[e.src].update(e.tensors)
    for t in g.outputs:
        outs_of[gg.group_of_op()[g.tensors[t].producer]].add(t)
    measured = {}
    for rows in (ROWS, 2 * ROWS):
        produced = {}
        for grp in gg.groups:
            saved = {}
            out, leaves = _group_run(program, g, groups, grp.id, produced, rows, saved)
            skip = {p.untyped_storage().data_ptr() for p in program.parameters()}  # weights: persistent
            skip |= {v.untyped_storage().data_ptr() for v in produced.values()}  # held by their own group
            skip |= {v.untyped_storage().data_ptr() for t, v in out.items()
                     if isinstance(v, torch.Tensor) and t in g.tensors and g.tensors[t].role == "data"}
            keep = {ptr: nb for ptr, (nb, _) in saved.items() if ptr not in skip}
            for t in outs_of[grp.id]:
                keep[out[t].untyped_storage().data_ptr()] = out[t].untyped_storage().nbytes()
            for x in leaves.values():
                keep[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
            measured[(grp.id, rows)] = sum(keep.values())
            produced.update({t: v for t, v in out.items() if isinstance(v, torch.Tensor) and t not in produced})
    for grp in gg.groups:
        row, fixed = group_held_bytes(g, grp.op_ids, sorted(outs_of[grp.id]), with_data=False, dtypes=dt)
        m1, m2 = measured[(grp.id, ROWS)], measured[(grp.id, 2 * ROWS)]
        m_row, m_fixed = (m2 - m1) / ROWS, 2 * m1 - m2
        assert row == pytest.approx(m_row, rel=0.02, abs=64), (grp.id, [g.ops[i].op_type for i in grp.op_ids])
        assert fixed == pytest.approx(m_fixed, rel=0.05, abs=4096), (grp.id, [g.ops[i].op_type for i in grp.op_ids])
