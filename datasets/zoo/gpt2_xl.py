"""GPT-2 XL (1.5 B parameters) exported from `transformers` as a user exports a model too big to hold.

FIELD-NOTES.md § ONNX: built from a `GPT2Config` on the meta device (no weights in memory), ``use_cache=False``
(otherwise torch.export fails on DynamicCache), ``torch.onnx.export(dynamo=True, optimize=False)`` (optimize fails on
meta tensors), every float initializer moved to a graph input without values, serialised with `onnx_ir`. GPT-2 has no
integer buffers in `transformers` 5 (position ids come from an arange in the graph); one that appears is an error
rather than a silently wrong constant.

    python datasets/zoo/gpt2_xl.py OUT.onnx [--seq 512]

The data input is ``input_ids`` int64 [batch, seq] with a symbolic batch. Not part of `datasets/build.py`'s zoo (the
file is 9 MB and takes ~20 s to export): `benchmarks/zero_gpt2.py` builds it on demand.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# gpt2-xl (Radford et al. 2019; the `gpt2-xl` config on the Hugging Face hub): 48 layers, d 1600, 25 heads
GPT2_XL = {"n_layer": 48, "n_embd": 1600, "n_head": 25, "vocab_size": 50257, "n_positions": 1024}


def gpt2_params(n_layer: int, n_embd: int, vocab_size: int, n_positions: int, **_) -> int:
    """Parameters of a GPT-2 LM with the head tied to the token embedding: embeddings V d + P d; per layer two
    LayerNorms (4 d), QKV (3 d^2 + 3 d), output projection (d^2 + d), MLP (8 d^2 + 5 d); the final LayerNorm 2 d.

    >>> gpt2_params(**GPT2_XL)
    1557611200
    """
    d = n_embd
    return vocab_size * d + n_positions * d + n_layer * (12 * d * d + 13 * d) + 2 * d


def export_gpt2_xl(path: str, seq: int = 512, config: dict | None = None) -> tuple[int, float]:
    """Export GPT-2 XL (or `config`) at sequence `seq` to `path`; returns (parameters in the module, seconds)."""
    import onnx_ir
    import torch
    import transformers

    t0 = time.perf_counter()
    cfg = transformers.GPT2Config(**(config or GPT2_XL), use_cache=False)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(cfg).eval()
    n_params = sum(p.numel() for p in model.parameters())
    ids = torch.zeros((2, seq), dtype=torch.long, device="meta")
    program = torch.onnx.export(model, (ids,), dynamo=True, optimize=False, input_names=["input_ids"],
                                dynamic_shapes=({0: torch.export.Dim("batch")},))
    graph = program.model.graph
    floats = {onnx_ir.DataType.FLOAT, onnx_ir.DataType.FLOAT16, onnx_ir.DataType.BFLOAT16, onnx_ir.DataType.DOUBLE}
    for name in list(graph.initializers):
        value = graph.initializers[name]
        if value.dtype not in floats:
            raise ValueError(f"{name}: an integer initializer has no values on the meta device")
        graph.initializers.pop(name)
        value.const_value = None
        graph.inputs.append(value)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    onnx_ir.save(program.model, path)
    return n_params, time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="the .onnx to write")
    p.add_argument("--seq", type=int, default=512, help="sequence length (default 512)")
    args = p.parse_args(argv)
    n, s = export_gpt2_xl(args.out, args.seq)
    print(f"{args.out}: {n:,} parameters, seq {args.seq}, exported in {s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
