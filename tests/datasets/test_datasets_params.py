"""Parameter counts of the committed zoo files, counted with the onnx package directly.

Params = elements of float graph inputs that are not data inputs + float initializers, each tensor once.
Expected figures are published counts (within 1%) and hand counts from the architectures.
"""

import os

import onnx
import pytest

DATASETS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "datasets")
MODELS_DIR = os.path.join(DATASETS, "models")


FLOAT = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)
DATA = {"image", "input_ids", "src", "tgt", "dense", "sparse", "x"}


def load(name):
    return onnx.load(os.path.join(MODELS_DIR, f"{name}.onnx"))


def param_count(model) -> int:
    seen, total = set(), 0
    for value in model.graph.input:
        t = value.type.tensor_type
        if value.name in DATA or value.name in seen or t.elem_type not in FLOAT:
            continue
        seen.add(value.name)
        n = 1
        for d in t.shape.dim:
            assert d.HasField("dim_value"), f"parameter {value.name} has a symbolic dim"
            n *= d.dim_value
        total += n
    for init in model.graph.initializer:
        if init.data_type in FLOAT and init.name not in seen:
            seen.add(init.name)
            n = 1
            for d in init.dims:
                n *= d
            total += n
    return total


def block(d, d_ff, attentions=1, norms=2):
    """One transformer layer by hand: attentions x (Q, K, V, O: 4 d^2 + 4 d), FFN, LayerNorms."""
    return attentions * (4 * d * d + 4 * d) + (d * d_ff + d_ff) + (d_ff * d + d) + norms * 2 * d


@pytest.mark.parametrize("name, published", [
    ("vgg19", 143.7e6),  # Simonyan & Zisserman; torchvision 143,667,240
    ("resnet50", 25.6e6),  # torchvision 25,557,032 (+53,120 BN running stats in the file)
    ("resnet101", 44.5e6),  # torchvision 44,549,160
    ("inception_v3", 23.8e6),  # torchvision 27,161,264 minus the 3,326,696 aux head
])
def test_vision_params_match_published(name, published):
    assert abs(param_count(load(name)) - published) / published < 0.01


def test_vgg19_exact_by_hand():
    convs = [(3, 64), (64, 64), (64, 128), (128, 128), (128, 256)] + [(256, 256)] * 3 + [(256, 512)] \
        + [(512, 512)] * 7
    expected = sum(9 * a * b + b for a, b in convs) + (25088 * 4096 + 4096) + (4096 * 4096 + 4096) \
        + (4096 * 1000 + 1000)
    assert expected == 143_667_240
    assert param_count(load("vgg19")) == expected


def test_bert_large_params():
    # 335,141,888 = embeddings (30522 + 512 + 2) x 1024 + LN 2,048, 24 layers x 12,596,224, pooler 1,049,600.
    # Published "335 M" (HF bert-large-uncased, 335,141,888 with pooler; 334.1 M without it). No MLM head.
    d = 1024
    expected = (30522 + 512 + 2) * d + 2 * d + 24 * block(d, 4096) + (d * d + d)
    assert expected == 335_141_888
    count = param_count(load("bert_large"))
    assert count == expected
    assert abs(count - 335e6) / 335e6 < 0.01


def test_gpt2_medium_params_with_tied_head():
    # 354,823,168: wte 50257 x 1024 (shared with the LM head, counted once), wpe 1024 x 1024,
    # 24 pre-LN blocks, final LayerNorm. Published GPT-2 medium: 354.8 M (often rounded to 345 M / 355 M).
    d = 1024
    expected = 50257 * d + 1024 * d + 24 * block(d, 4 * d) + 2 * d
    assert expected == 354_823_168
    count = param_count(load("gpt2_medium"))
    assert count == expected
    assert abs(count - 354.8e6) / 354.8e6 < 0.01


def test_gpt2_head_references_one_weight():
    model = load("gpt2_medium")
    big = [v.name for v in model.graph.input
           if [d.dim_value for d in v.type.tensor_type.shape.dim] in ([50257, 1024], [1024, 50257])]
    assert big == ["wte.weight"]
    users = [n for n in model.graph.node if "wte.weight" in n.input]
    assert {n.op_type for n in users} >= {"Gather"}
    assert len(users) >= 2  # the embedding lookup and the LM head (through Transpose/MatMul)


def test_transformer_base_params():
    d = 512
    expected = 32000 * d + 6 * block(d, 2048) + 6 * block(d, 2048, attentions=2, norms=3)
    assert param_count(load("transformer_base")) == expected


def test_dlrm_params():
    def mlp(sizes):
        return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    expected = mlp([13, 512, 256, 64]) + 8 * 1_000_000 * 64 + mlp([64 + 36, 512, 256, 1])
    assert param_count(load("dlrm")) == expected


def test_tiny_models_by_hand():
    assert param_count(load("mlp")) == 3 * (512 * 512 + 512)
    assert param_count(load("fc_wide")) == (2048 * 4096 + 4096) + (4096 * 4096 + 4096)
    assert param_count(load("gpt2_tiny")) == 2048 * 64 + 64 * 64 + 2 * block(64, 256) + 2 * 64
    assert param_count(load("bert_tiny")) == (2048 + 128 + 2) * 64 + 2 * 64 + 2 * block(64, 256) + 64 * 64 + 64
