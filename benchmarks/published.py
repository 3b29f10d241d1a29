"""Predictions against published GPU throughputs, kept as a lab entry point.

    python benchmarks/published.py [--fit] [--logo] [--out F.md]   is   tag bench --published [--fit] ...
    python benchmarks/published.py --export-graphs                  rebuilds the packaged graphs (below)

The comparison is product code in `tag/bench/` (published*.py; the calibration fit in `tag/cost/calibrate.py`),
reading the tables and graphs shipped in `tag/bench/data/published/`. `--export-graphs` re-exports the graphs
that datasets/models does not hold (BERT-large at sequence 384 and 512, ResNet-152 v1.5, VGG-16) from the
datasets zoo builders on the meta device into `tag/bench/data/published/models/`, as datasets/build.py does.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS_DIR = os.path.join(ROOT, "tag", "bench", "data", "published", "models")
VGG16_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
EXPORTED = ("bert_large_s384", "bert_large_s512", "resnet152", "vgg16")


def export_graph(key: str, path: str) -> None:
    """Export one zoo-builder model to `path`: "bert_large_s<seq>", "resnet152" (v1.5), "vgg16" (config D)."""
    sys.path.insert(0, ROOT)
    import onnx

    from datasets.zoo import text, vision
    from datasets.zoo.export import export_spec
    from datasets.zoo.spec import InputSpec, ModelSpec

    image = (InputSpec("image", (1, 3, 224, 224)),)
    if key == "resnet152":
        spec = ModelSpec(key, lambda: vision.ResNet((3, 8, 36, 3)), image, True, "ResNet-152 v1.5")
    elif key == "vgg16":
        spec = ModelSpec(key, lambda: vision.VGG(VGG16_CFG), image, True, "VGG-16")
    else:
        seq = int(key.rsplit("_s", 1)[1])
        spec = ModelSpec(key, text.bert_large, (InputSpec("input_ids", (1, seq), "int64", 30522),), True,
                         f"BERT-large, seq {seq}")
    proto, _ = export_spec(spec)
    onnx.save(proto, path + ".part")
    os.replace(path + ".part", path)


def main(argv: list[str]) -> int:
    if argv == ["--export-graphs"]:
        for key in EXPORTED:
            export_graph(key, os.path.join(GRAPHS_DIR, f"{key}.onnx"))
            print(os.path.join(GRAPHS_DIR, f"{key}.onnx"))
        return 0
    from tag.cli import main as tag_main

    return tag_main(["bench", "--published", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
