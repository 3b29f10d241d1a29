"""Transformer exports (dynamo exporter, symbolic batch) checked against FLOPs counted by formula.

Per encoder layer, MAC = 4 d^2 s (Q, K, V, output projections) + 2 s^2 d (scores and weighted sum)
+ 2 d d_ff s (feed-forward); FLOP = 2 x MAC.
"""

import math

import pytest

torch = pytest.importorskip("torch")

from tag.graph import load_model  # noqa: E402

D, HEADS, FF, LAYERS, SEQ, VOCAB = 64, 4, 256, 2, 16, 100


def formula_flops_per_sample(d=D, s=SEQ, ff=FF, layers=LAYERS):
    return 2 * layers * (4 * d * d * s + 2 * s * s * d + 2 * d * ff * s)


class BertLike(torch.nn.Module):
    """Token + position embeddings, LayerNorm, post-LN encoder layers with GELU feed-forward."""

    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, D)
        self.pos = torch.nn.Parameter(torch.zeros(SEQ, D))
        self.ln = torch.nn.LayerNorm(D)
        self.layers = torch.nn.ModuleList()
        for _ in range(LAYERS):
            self.layers.append(torch.nn.ModuleDict({
                "q": torch.nn.Linear(D, D), "k": torch.nn.Linear(D, D), "v": torch.nn.Linear(D, D),
                "o": torch.nn.Linear(D, D), "f1": torch.nn.Linear(D, FF), "f2": torch.nn.Linear(FF, D),
                "ln1": torch.nn.LayerNorm(D), "ln2": torch.nn.LayerNorm(D)}))

    def forward(self, ids):
        b, s = ids.shape
        x = self.ln(self.tok(ids) + self.pos[:s])
        hd = D // HEADS
        for L in self.layers:
            def heads(t):
                return t.view(b, s, HEADS, hd).transpose(1, 2)
            q, k, v = heads(L["q"](x)), heads(L["k"](x)), heads(L["v"](x))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1) @ v
            x = L["ln1"](x + L["o"](att.transpose(1, 2).reshape(b, s, D)))
            x = L["ln2"](x + L["f2"](torch.nn.functional.gelu(L["f1"](x))))
        return x


def _export(module, example, path):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():  # distinct values: the exporter would merge identical initializers
            p.normal_()
    module.eval()
    batch = torch.export.Dim("batch")
    prog = torch.onnx.export(module, (example,), dynamo=True, dynamic_shapes=({0: batch},))
    prog.save(str(path))
    return sum(p.numel() for p in module.parameters())


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    d = tmp_path_factory.mktemp("exports")
    layer = torch.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    n_enc = _export(enc, torch.randn(2, SEQ, D), d / "enc.onnx")
    n_bert = _export(BertLike(), torch.randint(0, VOCAB, (2, SEQ)), d / "bert.onnx")
    return {"enc": (load_model(d / "enc.onnx"), n_enc), "bert": (load_model(d / "bert.onnx"), n_bert)}


def _flops(g, cls=None):
    return sum(op.fwd_flops_per_row for op in g.ops if cls is None or op.op_class == cls)


@pytest.mark.parametrize("name", ["enc", "bert"])
def test_params_and_flops_against_formula(exports, name):
    g, n_params = exports[name]
    assert g.param_count == n_params
    want = formula_flops_per_sample()
    # products alone: the formula plus the Linear biases at most
    bias_flops = LAYERS * SEQ * (4 * D + FF + D)
    assert want <= _flops(g, "matmul") <= want + bias_flops
    assert abs(_flops(g) - want) / want < 0.10
    assert all(op.fwd_flops_fixed == 0 for op in g.ops if op.batched)
    assert g.file_batch == 1 and g.batch_size == 32
    assert all(t.shape is not None for t in g.tensors.values())


def test_bert_like_roles_and_rows(exports):
    g, _ = exports["bert"]
    assert g.data_inputs == ["ids"] and g.tensors["ids"].dtype == "int64"
    gather = next(op for op in g.ops if op.op_type == "Gather" and op.param_count)
    assert gather.param_count == VOCAB * D and gather.fwd_flops_per_row == 0
    # own attention keeps the batch outermost: every op can split rows
    assert all(op.splittable for op in g.ops)
    out = g.tensors[g.outputs[0]]
    assert out.batch_axis == 0 and out.shape == (1, SEQ, D)
    softmax = [op for op in g.ops if op.op_class == "softmax"]
    assert len(softmax) == LAYERS and all(op.fwd_flops_per_row == 5 * HEADS * SEQ * SEQ for op in softmax)


def test_torch_mha_interleaves_rows(exports):
    """nn.MultiheadAttention works in (S, B, E) layout: reshapes to (S*B, E) put the batch inside a merged
    axis, so those ops cannot split contiguous rows, while their costs still scale with rows."""
    g, _ = exports["enc"]
    bad = [op for op in g.ops if not op.splittable]
    assert bad and all(op.op_type in ("Reshape", "Gemm", "MatMul") for op in bad)
    assert all(g.tensors[o].batch_axis is not None for op in bad for o in op.outputs)
