"""`tag profile ops` on a small hand-built ONNX model: every op measured, groups agree with their ops'
sums, the machine block is self-consistent, and the profile drives the cost model for every op."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tag.cli import main
from tag.cost import make_cost_model
from tag.cost.profile_db import interpolate, load, op_signature, save
from tag.graph import load_model
from tag.graph.coarsen import coarsen
from tag.strategy import TrainingConfig
from tag.topology.catalog import CATALOG

ROWS = [1, 3]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """x[N,16] -> MatMul(w1) -> Add(b) -> Relu -> MatMul(w2) -> Relu -> y[N,16]; MatMuls and Relus share signatures."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
             helper.make_node("Add", ["h1", "b"], ["h2"], name="add"),
             helper.make_node("Relu", ["h2"], ["h3"], name="relu1"),
             helper.make_node("MatMul", ["h3", "w2"], ["h4"], name="mm2"),
             helper.make_node("Relu", ["h4"], ["y"], name="relu2")]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits)
    path = tmp_path_factory.mktemp("m") / "tiny.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.fixture(scope="module")
def profiled(model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("p") / "cpu.json"
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["profile", "ops", model_path, "-o", str(out), "--rows", "1,3", "--warmup", "1", "--repeats", "3",
                     "--quick", "--groups", "2", "--batch-size", "4", "--json"])
    assert code == 0
    return str(out), json.loads(buf.getvalue())


def test_every_op_signature_measured_at_every_row_count(model_path, profiled):
    path, summary = profiled
    db = load(path)
    graph = load_model(model_path, batch_size=4)
    sigs = {op_signature(op, graph) for op in graph.ops if not op.is_weight_generator}
    assert set(db.ops) == sigs and len(sigs) == 3  # the two MatMuls share one signature, as do the Relus
    for p in db.ops.values():
        assert p.rows == ROWS and len(p.fwd_ms) == 2 and all(t > 0 for t in p.fwd_ms)
        assert p.bwd_ms is not None and all(t > 0 for t in p.bwd_ms)  # every op here is differentiable
    assert db.device_type == "cpu" and db.threads == 1 and db.settings["rows"] == ROWS
    assert summary["signatures"] == 3 and summary["ops"] == 5 and summary["groups"] == 2 and summary["path"] == path


def test_groups_record_their_ops_sums(model_path, profiled):
    db = load(profiled[0])
    graph = load_model(model_path, batch_size=4)
    by_name = {op.name: op for op in graph.ops}
    assert sorted(n for g in db.groups for n in g.ops) == sorted(by_name)
    for g in db.groups:
        for k, r in enumerate(ROWS):
            fwd = sum(db.ops[op_signature(by_name[n], graph)].fwd_ms[k] for n in g.ops)
            bwd = sum(db.ops[op_signature(by_name[n], graph)].bwd_ms[k] for n in g.ops)
            assert g.ops_fwd_ms[k] == pytest.approx(fwd) and g.ops_bwd_ms[k] == pytest.approx(bwd)
            assert g.fwd_ms[k] > 0 and g.bwd_ms[k] > 0


def test_machine_block_is_consistent(profiled):
    db = load(profiled[0])
    m = db.machine
    assert m["peak_tflops"] == pytest.approx(m["matmul_gflops"] / 1e3, rel=1e-3)
    assert m["memory_bandwidth_gbps"] == pytest.approx(8 * m["copy_gbytes_per_s"], rel=1e-3)
    assert m["threads"] == 1 and m["torch"].startswith("2.13") and m["cores"] >= 1
    assert 0 < db.dispatch_ms < 1.0 and db.dispatch_ms == m["dispatch_ms"]
    cat = profiled[1]["catalog"]
    assert cat["peak_tflops"] == CATALOG["cpu"].peak_tflops
    assert cat["peak_ratio"] == pytest.approx(m["peak_tflops"] / CATALOG["cpu"].peak_tflops)


def test_profile_drives_the_cost_model_for_every_op(model_path, profiled, tmp_path):
    db = load(profiled[0])
    db.step = None  # per-op figures only: a group is the sum of its ops
    save(db, str(tmp_path / "ops_only.json"))
    graph = load_model(model_path, batch_size=4)
    gg = coarsen(graph, k=2, n_devices=1)
    cm = make_cost_model(gg, TrainingConfig(), str(tmp_path / "ops_only.json"))
    assert cm.matched_ops == 5
    cpu = CATALOG["cpu"]
    for g in gg.groups:
        want = sum(interpolate(ROWS, db.ops[op_signature(graph.ops[i], graph)].fwd_ms, 2) for i in g.op_ids)
        assert cm.group_fwd_ms(g.id, cpu, 2) == pytest.approx(want)  # 2 rows: halfway between 1 and 3


def test_step_block_measured_and_shared_over_ops(model_path, profiled):
    """The step block: every group in the step, the update and the copies; the cost model shares each step
    group's time over its ops by their own figures (worked out here op by op)."""
    db = load(profiled[0])
    graph = load_model(model_path, batch_size=4)
    st = db.step
    assert st is not None and st.rows == ROWS and st.optimizer == "adam"
    assert sorted(n for g in st.groups for n in g.ops) == sorted(op.name for op in graph.ops)
    assert all(t > 0 for g in st.groups for t in g.fwd_ms + g.bwd_ms) and all(t > 0 for t in st.update_ms)
    with_params = [g for g in st.groups if g.param_bytes > 0]
    assert with_params and all(g.update_ms > 0 for g in with_params)
    assert sum(g.param_bytes for g in st.groups) == 4 * (16 * 16 * 2 + 16)
    assert st.copy_bytes == sorted({g.param_bytes for g in with_params}) and all(t > 0 for t in st.copy_in_ms)
    assert len(st.fill_ms) == len(st.copy_bytes) and all(t > 0 for t in st.fill_ms)  # a fresh buffer per size
    by_name = {op.name: i for i, op in enumerate(graph.ops)}
    own = {n: db.ops[op_signature(graph.ops[i], graph)] for n, i in by_name.items()}
    gg = coarsen(graph, k=2, n_devices=1)
    cm = make_cost_model(gg, TrainingConfig(), profiled[0])
    cpu = CATALOG["cpu"]
    fwd_at = {}  # op name -> in-step forward series
    for g in st.groups:
        for k in range(len(ROWS)):
            total = sum(own[n].fwd_ms[k] for n in g.ops)
            for n in g.ops:
                fwd_at.setdefault(n, []).append(g.fwd_ms[k] * own[n].fwd_ms[k] / total)
    for g in gg.groups:
        want = sum(interpolate(ROWS, fwd_at[graph.ops[i].name], 2) for i in g.op_ids)
        assert cm.group_fwd_ms(g.id, cpu, 2) == pytest.approx(want)
    # the update: the in-step optimizer time shared by the groups' alone figures, then by bytes
    alone = sum(g.update_ms for g in st.groups)
    want_total = float(np.median(st.update_ms))
    got_total = sum(cm.update_ms(g.id, cpu) for g in gg.groups)
    assert got_total == pytest.approx(want_total) and alone > 0


def test_bad_flags_exit_2_with_one_line(model_path, tmp_path, capsys):
    for argv in (["--rows", "0,2"], ["--rows", "a"], ["--device", "cuda:999"], ["--device", "tpu"], ["--repeats", "0"]):
        code = main(["profile", "ops", model_path, "-o", str(tmp_path / "x.json"), *argv])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and err.startswith("tag profile: error:"), (argv, err)
    assert not (tmp_path / "x.json").exists()
