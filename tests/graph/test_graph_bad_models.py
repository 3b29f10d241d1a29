"""Bad models: exit 2 and one stderr line naming the file and the input or node."""

import json
import os

import onnx
from onnx import helper

from tag.cli import main
from tests.graph.helpers_graph import F, I64, save, w

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")


def _fails(capsys, *argv):
    rc = main(["inspect", *argv])
    cap = capsys.readouterr()
    lines = cap.err.strip("\n").split("\n")
    assert rc == 2 and len(lines) == 1 and cap.out == "", (rc, cap.err)
    return lines[0]


def test_not_onnx(tmp_path, capsys):
    p = tmp_path / "notes.onnx"
    p.write_text("this is not a model\n")
    line = _fails(capsys, str(p))
    assert str(p) in line and "ONNX" in line


def test_truncated(tmp_path, capsys):
    data = open(os.path.join(LIGHT, "light_resnet50.onnx"), "rb").read()
    for cut in (len(data) // 2, len(data) - 7):
        p = tmp_path / f"cut{cut}.onnx"
        p.write_bytes(data[:cut])
        assert str(p) in _fails(capsys, str(p))


def test_missing_file(tmp_path, capsys):
    assert "no such file" in _fails(capsys, str(tmp_path / "nope.onnx"))


def test_unknown_domain_names_the_node(tmp_path, capsys):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Frobnicate", ["a"], ["y"], name="weird", domain="acme.ops")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["N", 4])],
                              [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme.ops", 1)])
    p = tmp_path / "dom.onnx"
    onnx.save(model, str(p))
    line = _fails(capsys, str(p))
    assert str(p) in line and "node 'weird' (acme.ops.Frobnicate)" in line and "acme.ops" in line


def test_symbolic_image_size_needs_input_shape(tmp_path, capsys):
    nodes = [helper.make_node("Conv", ["img", "k"], ["y"], kernel_shape=[3, 3])]
    p = save(tmp_path, nodes, [("img", F, ["N", 3, "H", "W"])], [("y", F, None)], [("k", w(8, 3, 3, 3))])
    line = _fails(capsys, p)
    assert p in line and "input 'img'" in line and "--input-shape" in line
    assert "(e.g. img=1x3x128x128)" in line  # an example the user can paste: it is accepted as written
    assert main(["inspect", p, "--input-shape", "img=1x3x128x128", "--json"]) == 0
    capsys.readouterr()
    short = _fails(capsys, p, "--input-shape", "img=10x12")
    assert "--input-shape img=DIMS with 4 dims, the batch first (e.g. img=1x3x128x128), found 10x12" in short
    rc = main(["inspect", p, "--input-shape", "img=2x3x10x12", "--json"])
    s = json.loads(capsys.readouterr().out)
    assert rc == 0 and s["batch_size"] == 2 and s["unknown_shapes"] == 0
    assert s["forward_flops_per_sample"] == 2 * 8 * 8 * 10 * 27


def test_time_major_input_says_batch_first(tmp_path, capsys):
    """[T, N, I] with the batch symbolic on axis 1 (torch.nn.LSTM's default layout): one line saying that rows are
    read from axis 0, how to export batch-first, and the --input-shape to paste if N is a length instead."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    p = save(tmp_path, nodes, [("x", F, [10, "N", 8])], [("y", F, None)], [])
    line = _fails(capsys, p)
    assert "input 'x': expected the batch on axis 0: if N is the batch (a time-major input), export the model " \
           "batch-first" in line
    assert "found dims [10, N, 8], the symbolic N on axis 1" in line
    assert "--input-shape x=1x128x8" in line
    assert main(["inspect", p, "--input-shape", "x=1x128x8", "--json"]) == 0  # the pasted flag is accepted


def test_non_float_input_that_is_not_data(tmp_path, capsys):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Gather", ["a", "idx"], ["y"], axis=1)]
    p = save(tmp_path, nodes, [("x", F, ["N", 8]), ("idx", I64, [3])], [("y", F, None)])
    line = _fails(capsys, p)
    assert p in line and "input 'idx'" in line
    rc = main(["inspect", p, "--data-input", "x", "--data-input", "idx", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["unknown_shapes"] == 0


def test_data_input_that_does_not_exist(tmp_path, capsys):
    p = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["N", 8])], [("y", F, None)])
    assert "input 'nope'" in _fails(capsys, p, "--data-input", "nope")


def test_human_output_prints_batch_and_table(capsys):
    rc = main(["inspect", os.path.join(LIGHT, "light_squeezenet.onnx"), "--batch-size", "48"])
    out = capsys.readouterr().out
    assert rc == 0 and "batch: 48" in out and "costliest 10 ops" in out
    assert len([ln for ln in out.splitlines() if " Conv " in ln]) == 10  # squeezenet's costliest ops are convs
