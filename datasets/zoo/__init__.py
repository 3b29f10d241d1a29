"""The tag model zoo: builders in plain torch and the list of models datasets/build.py exports.

MODELS maps a model name to its ModelSpec; the committed file is datasets/models/<name>.onnx.
"""

from __future__ import annotations

from . import inception, recsys, small, text, vision
from .spec import InputSpec, ModelSpec

IMAGE = (3, 224, 224)
SEQ = 128  # fixed sequence length of the large language models

_SPECS = [
    # Large models: weights are graph inputs without values.
    ModelSpec("vgg19", vision.vgg19, (InputSpec("image", (1,) + IMAGE),), True,
              "VGG-19 (configuration E), 224 x 224, 1000 classes", 143_667_240),
    ModelSpec("resnet50", vision.resnet50, (InputSpec("image", (1,) + IMAGE),), True,
              "ResNet-50 v1.5, 224 x 224, 1000 classes", 25_557_032),
    ModelSpec("resnet101", vision.resnet101, (InputSpec("image", (1,) + IMAGE),), True,
              "ResNet-101 v1.5, 224 x 224, 1000 classes", 44_549_160),
    ModelSpec("inception_v3", inception.inception_v3, (InputSpec("image", (1, 3, 299, 299)),), True,
              "Inception-v3 without aux head, 299 x 299, 1000 classes", 23_834_568),
    ModelSpec("transformer_base", text.transformer_base,
              (InputSpec("src", (1, SEQ), "int64", 32000), InputSpec("tgt", (1, SEQ), "int64", 32000)), True,
              "Transformer-base NMT, d 512, 6+6 layers, 8 heads, d_ff 2048, shared 32k vocabulary"),
    ModelSpec("bert_large", text.bert_large, (InputSpec("input_ids", (1, SEQ), "int64", 30522),), True,
              "BERT-large encoder + pooler, 24 x 1024, 16 heads, seq 128", 335_141_888),
    ModelSpec("gpt2_medium", text.gpt2_medium, (InputSpec("input_ids", (1, SEQ), "int64", 50257),), True,
              "GPT-2 medium, 24 x 1024, 16 heads, seq 128, LM head tied to wte", 354_823_168),
    ModelSpec("dlrm", recsys.dlrm,
              (InputSpec("dense", (1, 13)), InputSpec("sparse", (1, 8), "int64", 1_000_000)), True,
              "DLRM: bottom 13-512-256-64, 8 tables x 1M x 64, dot interaction, top 100-512-256-1"),
    ModelSpec("fc_wide", small.fc_wide, (InputSpec("x", (1, 2048)),), True,
              "Two wide Linear layers 2048 -> 4096 -> 4096"),
    # Small models: real seeded weights as initializers.
    ModelSpec("mlp", small.mlp, (InputSpec("x", (1, 512)),), False, "3 x Linear 512 wide"),
    ModelSpec("small_cnn", vision.small_cnn, (InputSpec("image", (1, 3, 32, 32)),), False,
              "3 conv + BN + ReLU, 2 max-pools, FC; 32 x 32, 10 classes"),
    ModelSpec("small_transformer", text.small_transformer,
              (InputSpec("input_ids", (1, 32), "int64", 1000),), False,
              "2-layer encoder classifier, d 128, seq 32"),
    ModelSpec("resnet_tiny", vision.resnet_tiny, (InputSpec("image", (1, 3, 32, 32)),), False,
              "ResNet bottleneck structure, 1 block per stage, width 8; 32 x 32, 10 classes"),
    ModelSpec("inception_tiny", inception.inception_tiny, (InputSpec("image", (1, 3, 75, 75)),), False,
              "Inception-v3 structure with channels / 16; 75 x 75, 10 classes"),
    ModelSpec("bert_tiny", text.bert_tiny, (InputSpec("input_ids", (1, 32), "int64", 2048),), False,
              "BERT structure: 2 layers, d 64, seq 32"),
    ModelSpec("gpt2_tiny", text.gpt2_tiny, (InputSpec("input_ids", (1, 32), "int64", 2048),), False,
              "GPT-2 structure: 2 layers, d 64, seq 32, tied head"),
    ModelSpec("transformer_tiny", text.transformer_tiny,
              (InputSpec("src", (1, 16), "int64", 1000), InputSpec("tgt", (1, 16), "int64", 1000)), False,
              "Transformer NMT structure: d 64, 2+2 layers, seq 16"),
    ModelSpec("dlrm_tiny", recsys.dlrm_tiny,
              (InputSpec("dense", (1, 13)), InputSpec("sparse", (1, 4), "int64", 1000)), False,
              "DLRM structure: 4 tables x 1000 x 16"),
]

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}

__all__ = ["MODELS", "InputSpec", "ModelSpec"]
