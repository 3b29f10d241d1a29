"""Models users export from `transformers`, read with no clean-up (issue 21, must-show 0).

Users export a model too big to hold the way FIELD-NOTES.md describes: built on the meta device from a config,
``torch.onnx.export(..., dynamo=True, optimize=False)``, causal LMs with ``use_cache=False``, float weights moved
to graph inputs, serialised with ``onnx_ir``. Those files hold SplitToSequence/SequenceAt and the exporter's
shape plumbing. Small configs of GPT-2 (medium- and large-like), OPT (also at sequence 2048, where
`propagate_batch` raised IndexError), BERT, Llama and ViT are exported here and loaded with the shape evaluator's budget at
zero, as for a real-size model whose weights exceed it: every shape known, every MatMul/Gemm splittable by rows,
parameters and matmul FLOPs equal to the counts worked out from the config, `tag inspect` exits 0.

The hand-built graphs below (no transformers needed) pin the sequence, CastLike and literal-cast rules on
values worked out by hand.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tag.graph.shapes as shapes_mod
from tag.cli import main
from tag.graph import load_model


@pytest.fixture
def no_evaluator(monkeypatch):
    """The evaluator fallback off (its feed budget at 0 bytes), as for a model whose weights exceed it."""
    monkeypatch.setattr(shapes_mod, "_EVAL_FEED_LIMIT_BYTES", 0)


# ---------------------------------------------------------------- hand-built graphs (run everywhere)

def _const(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))


def _sequence_model(path):
    """x[batch, 6, 8]: split on axis 1 into 3 chunks of 2 (a SequenceAt of each end feeds a MatMul), and a
    Transpose to [6, batch, 8] split into 6 squeezed rows (SequenceAt 5 feeds a Gemm); SequenceLength and
    ConcatFromSequence of the first sequence, the rows stacked back on a new axis 0; a CastLike whose second input is a reshaped batched tensor; a
    Range whose start and step are float literals cast with CastLike (as the dynamo exporter writes arange)."""
    nodes = [
        _const("two", 2), _const("first", 0), _const("last", -1), _const("five", 5),
        helper.make_node("SplitToSequence", ["x", "two"], ["seq"], axis=1),
        helper.make_node("SequenceAt", ["seq", "first"], ["a"]),
        helper.make_node("SequenceAt", ["seq", "last"], ["b"]),
        helper.make_node("MatMul", ["a", "w"], ["y"]),
        helper.make_node("Add", ["b", "b"], ["b2"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
        helper.make_node("SplitToSequence", ["xt"], ["rows"], axis=0, keepdims=0),
        helper.make_node("SequenceAt", ["rows", "five"], ["c"]),
        helper.make_node("Gemm", ["c", "w2"], ["z"]),
        helper.make_node("SequenceLength", ["rows"], ["n"]),
        helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=1),
        helper.make_node("ConcatFromSequence", ["rows"], ["stack"], axis=0, new_axis=1),
        _const("flat", [0, 48]),
        helper.make_node("Reshape", ["x", "flat"], ["xr"]),
        _const("k", 3),
        helper.make_node("CastLike", ["k", "xr"], ["kf"]),
        helper.make_node("Mul", ["xr", "kf"], ["scaled"]),
        _const("zero_f", 0.0, np.float32), _const("one_f", 1.0, np.float32), _const("four", 4),
        helper.make_node("CastLike", ["zero_f", "four"], ["start"]),
        helper.make_node("CastLike", ["one_f", "four"], ["step"]),
        helper.make_node("Range", ["start", "four", "step"], ["pos"]),
        helper.make_node("Gather", ["table", "pos"], ["pos_emb"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "seq",
        [helper.make_tensor_value_info("x", f, ["batch", 6, 8])],
        [helper.make_tensor_value_info(o, TensorProto.INT64 if o == "n" else f, None)
         for o in ("y", "b2", "z", "n", "cat", "stack", "scaled", "pos_emb")],
        initializer=[numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(8, 5), "w"),
                     numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(8, 3), "w2"),
                     numpy_helper.from_array(np.arange(80, dtype=np.float32).reshape(10, 8), "table")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_sequences_castlike_and_literal_casts_by_hand(tmp_path, no_evaluator):
    p = str(tmp_path / "seq.onnx")
    _sequence_model(p)
    g = load_model(p)
    t = g.tensors
    by_type = {}
    for op in g.ops:
        by_type.setdefault(op.op_type, []).append(op)
    # shapes at the file's batch 1; a sequence is recorded with the shape of the tensor it splits
    expect = {"seq": (1, 6, 8), "a": (1, 2, 8), "b": (1, 2, 8), "y": (1, 2, 5), "rows": (6, 1, 8), "c": (1, 8),
              "z": (1, 3), "n": (), "cat": (1, 6, 8), "stack": (6, 1, 8), "kf": (), "scaled": (1, 48), "pos": (4,), "pos_emb": (4, 8)}
    assert {k: t[k].shape for k in expect} == expect
    assert sum(1 for x in t.values() if x.shape is None) == 0
    assert [op.name for op in g.ops if op.batched and not op.splittable] == []
    # batch axes: the split keeps axis 0; the squeezed split of axis 0 moves the batch from 1 to 0
    axes = {"seq": 0, "a": 0, "b": 0, "y": 0, "rows": 1, "c": 0, "z": 0, "cat": 0, "stack": 1, "scaled": 0,
            "n": None, "kf": None, "pos": None, "pos_emb": None}
    assert {k: t[k].batch_axis for k in axes} == axes
    for typ in ("SplitToSequence", "SequenceAt", "MatMul", "Gemm", "ConcatFromSequence", "Mul"):
        assert all(op.batched and op.splittable for op in by_type[typ]), typ
    cast_like = [op for op in by_type["CastLike"] if op.outputs == ["kf"]][0]
    assert not cast_like.batched and cast_like.fwd_flops_per_row == 0 and cast_like.mem_bytes_per_row == 0
    # costs by hand (float32): the split moves nothing, each SequenceAt reads and writes its element
    split = by_type["SplitToSequence"][0]
    assert split.mem_bytes_per_row == 0 and split.mem_bytes_fixed == 0 and split.op_class == "data_movement"
    at = {op.outputs[0]: op for op in by_type["SequenceAt"]}
    assert at["a"].mem_bytes_per_row == 2 * (2 * 8 * 4) and at["c"].mem_bytes_per_row == 2 * (8 * 4)
    assert by_type["MatMul"][0].fwd_flops_per_row == 2 * 2 * 5 * 8
    assert by_type["Gemm"][0].fwd_flops_per_row == 2 * 3 * 8
    # the arange traced from literals is plumbing: free
    for op in by_type["Range"] + [o for o in by_type["CastLike"] if o.outputs[0] in ("start", "step")]:
        assert op.op_class == "shape" and op.mem_bytes_fixed == 0 and op.fwd_flops_fixed == 0
    assert g.warnings == []


def test_castlike_of_batched_reshape_does_not_raise(tmp_path, capsys):
    """The OPT-350M crash: CastLike(scalar, batched tensor after a Reshape) gave axis -4 -> IndexError."""
    p = str(tmp_path / "seq.onnx")
    _sequence_model(p)
    assert main(["inspect", p, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["unknown_shapes"] == 0 and d["unsplittable_ops"] == 0


# ---------------------------------------------------------------- transformers exports

GPT2_MEDIUM_LIKE = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=96, n_positions=64)
GPT2_LARGE_LIKE = dict(n_layer=3, n_embd=80, n_head=5, vocab_size=96, n_positions=64)
OPT_SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128, vocab_size=96,
                 max_position_embeddings=64, word_embed_proj_dim=64)
OPT_2048 = dict(OPT_SMALL, hidden_size=32, num_attention_heads=2, ffn_dim=64, word_embed_proj_dim=32,
                max_position_embeddings=2048, num_hidden_layers=1)
BERT_SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                  vocab_size=96, max_position_embeddings=64)
LLAMA_SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=96, max_position_embeddings=64)
VIT_SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                 patch_size=8)
# name: (family, config, batch (None: symbolic), sequence length (ViT: image side))
CASES = {
    "gpt2_medium_like": ("gpt2", GPT2_MEDIUM_LIKE, None, 16),
    "gpt2_large_like": ("gpt2", GPT2_LARGE_LIKE, 2, 24),
    "opt_small": ("opt", OPT_SMALL, None, 16),
    "opt_seq2048": ("opt", OPT_2048, 1, 2048),
    "bert_small": ("bert", BERT_SMALL, None, 16),
    "llama_small": ("llama", LLAMA_SMALL, None, 16),  # rotary positions, grouped KV heads, RMSNorm
    "vit_small": ("vit", VIT_SMALL, 2, 32),  # image input, Conv patches
}
CAUSAL = ("gpt2", "opt", "llama")


def _build(family, config, device):
    import torch
    import transformers as tf

    cls, cfg = {"gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config), "opt": (tf.OPTForCausalLM, tf.OPTConfig),
                "bert": (tf.BertModel, tf.BertConfig), "llama": (tf.LlamaForCausalLM, tf.LlamaConfig),
                "vit": (tf.ViTModel, tf.ViTConfig)}[family]
    extra = {"use_cache": False} if family in CAUSAL else {}
    with torch.device(device):
        model = cls(cfg(**config, **extra))
    return model.eval()


def export_like_users(family, config, batch, seq, path):
    """Export as FIELD-NOTES.md says users do; returns the module's parameter count (tied weights once) plus
    the elements of the float buffers the graph uses.

    Integer buffers (BERT's position and token-type ids) have no values on the meta device: they get the
    values of a CPU build of the same config, as a user keeps them."""
    import onnx_ir
    import torch

    model = _build(family, config, "meta")
    n_params = sum(p.numel() for p in model.parameters())
    float_buffers = {n: b.numel() for n, b in model.named_buffers() if b.is_floating_point()}
    if family == "vit":
        x, name = torch.zeros((batch or 2, 3, seq, seq), device="meta"), "pixel_values"
    else:
        x, name = torch.zeros((batch or 2, seq), dtype=torch.long, device="meta"), "input_ids"
    dyn = {"dynamic_shapes": ({0: torch.export.Dim("batch")},)} if batch is None else {}
    program = torch.onnx.export(model, (x,), dynamo=True, optimize=False, input_names=[name], **dyn)
    graph = program.model.graph
    floats = {onnx_ir.DataType.FLOAT, onnx_ir.DataType.FLOAT16, onnx_ir.DataType.BFLOAT16, onnx_ir.DataType.DOUBLE}
    buffers = None
    for name in list(graph.initializers):
        value = graph.initializers[name]
        if value.dtype in floats:  # a float buffer the graph uses (Llama's rotary inv_freq) is a weight input too
            n_params += float_buffers.get(name, 0)
            graph.initializers.pop(name)
            value.const_value = None
            graph.inputs.append(value)
        else:
            if buffers is None:
                buffers = dict(_build(family, config, "cpu").named_buffers())
            value.const_value = onnx_ir.tensor(buffers[name].numpy(), name=name)
    onnx.save(onnx_ir.serde.serialize_model(program.model), path)
    return n_params


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("onnx_ir")
    d = tmp_path_factory.mktemp("hf")
    out = {}
    for name, (family, config, batch, seq) in CASES.items():
        path = str(d / f"{name}.onnx")
        out[name] = (path, export_like_users(family, config, batch, seq, path))
    return out


def matmul_flops_per_sample(family, c, seq):
    """MatMul/Gemm forward FLOPs of one sequence, from the config (FLOP = 2 x MAC).

    Per layer: projections 2 s (4 d^2 + 2 d f) (Q, K, V, output; feed-forward of width f), attention 2 x 2 s^2 d
    (scores and weighted sum, all heads), plus the bias adds of Gemms; Llama: 2 s (2 d^2 + 2 d kv + 3 d f) with
    kv = KV heads x head dim. Causal LMs add the LM head 2 s d V; BERT and ViT their pooler 2 d^2 + d (first
    token only).
    """
    if family == "gpt2":
        d, f, layers, head = c["n_embd"], 4 * c["n_embd"], c["n_layer"], c["vocab_size"]
    elif family == "opt":
        d, f, layers, head = c["hidden_size"], c["ffn_dim"], c["num_hidden_layers"], c["vocab_size"]
    else:
        d, f, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
        head = c["vocab_size"] if family == "llama" else 0
    if family == "vit":  # tokens: the patches and the class token (the patch projection is a Conv)
        seq = (c["image_size"] // c["patch_size"]) ** 2 + 1
    per_layer = 2 * seq * (4 * d * d + 2 * d * f) + 4 * seq * seq * d
    if family == "llama":  # K and V project to the grouped heads only; the gated MLP has three matrices
        kv = c["num_key_value_heads"] * (d // c["num_attention_heads"])
        per_layer = 2 * seq * (2 * d * d + 2 * d * kv + 3 * d * f) + 4 * seq * seq * d
    # bias adds of the projections exported as Gemm (on 2-D inputs) count M x N: GPT-2's Conv1D is addmm
    # everywhere (Q, K, V, output, both FF); OPT flattens only its feed-forward to 2-D; BERT and ViT only
    # their pooler (first token); Llama has no biases
    per_layer += seq * {"gpt2": 3 * d + d + f + d, "opt": f + d}.get(family, 0)
    total = layers * per_layer + 2 * seq * d * head
    return total + (2 * d * d + d if family in ("bert", "vit") else 0)


@pytest.mark.parametrize("name", list(CASES))
def test_export_reads_whole(exports, name, no_evaluator):
    path, n_params = exports[name]
    family, config, batch, seq = CASES[name]
    g = load_model(path)
    assert [n for n, t in g.tensors.items() if t.shape is None] == []
    products = [op for op in g.ops if op.op_type in ("MatMul", "Gemm")]
    assert products and all(op.batched and op.splittable for op in products)
    assert [op.name for op in g.ops if op.batched and not op.splittable] == []
    assert g.warnings == []  # every op type has a cost rule
    assert g.param_count == n_params
    mm = sum(op.fwd_flops_per_row for op in products)
    assert mm == pytest.approx(matmul_flops_per_sample(family, config, seq), rel=1e-12)
    assert g.file_batch == (batch or 1)


def test_gpt2_split_is_a_split(exports, no_evaluator):
    """GPT-2's QKV split: 3 elements of [batch, s, d] per layer; the pair moves 2 x the split's input bytes."""
    path, _ = exports["gpt2_large_like"]
    _, c, batch, seq = CASES["gpt2_large_like"]
    g = load_model(path)
    d = c["n_embd"]
    splits = [op for op in g.ops if op.op_type == "SplitToSequence"]
    ats = [op for op in g.ops if op.op_type == "SequenceAt"]
    assert len(splits) == c["n_layer"] and len(ats) == 3 * c["n_layer"]
    assert all(g.tensors[op.outputs[0]].shape == (batch, seq, d) for op in ats)
    assert all(op.mem_bytes_per_row == 0 for op in splits)
    assert sum(op.mem_bytes_per_row for op in ats) == c["n_layer"] * 2 * (seq * 3 * d * 4)


@pytest.mark.parametrize("name", list(CASES))
def test_inspect_exits_0(exports, name, capsys):
    path, _ = exports[name]
    assert main(["inspect", path, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["unknown_shapes"] == 0 and d["unsplittable_ops"] == 0 and d["warnings"] == []
