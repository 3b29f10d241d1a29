"""The machine's speed now, for one model: thread CPU ms of the deploy runtime's single-rank step at ROWS rows.

Other tenants of a shared machine (and the host's placement of this VM's two vCPUs) slow even the CPU time
of the same work, and by a different amount when both ranks compute at once (shared caches and memory
bandwidth, SMT siblings on the host). `tag profile ops` records this step in its ``step`` block
(`tag.profile.step.step_times`, the same runtime, groups and rows); `reference_step_cpu_ms` times it again.
`batch_worker.py` runs it in every round next to the plans it measures, once on rank 0 alone and once on every
rank at the same time at rows / ranks, and the fidelity benchmark scales the profile by reference / profile
(`fidelity.speed_from_reference`).

    python benchmarks/emulate/speed_probe.py MODEL.onnx ROWS      # prints the figure of this process, alone
"""

from __future__ import annotations

import sys


def reference_runtime(model_path: str, rows: int, proto=None):
    """The single-rank `RankRuntime` the profile's step block timed: every group of ``tag profile ops``'s
    grouping (`coarsen` for one device) on one rank with all `rows` rows, Adam, seed 0."""
    import onnx

    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.profile.step import _single_rank_runtime

    graph = load_model(model_path, batch_size=rows, n_devices=1)
    gg = coarsen(graph, k=None, n_devices=1)
    proto = proto if proto is not None else onnx.load(model_path)
    return _single_rank_runtime(proto, graph, [list(g.op_ids) for g in gg.groups], rows, 0, "adam", 1e-3)


def step_cpu_ms(rt, warmup: int = 1, repeats: int = 3) -> float:
    """Median thread CPU ms of `rt.step()` over `repeats` steps after `warmup` untimed ones
    (`tag.profile.speed_check.time_step_ms`)."""
    from tag.profile.speed_check import time_step_ms

    return time_step_ms(rt, warmup, repeats)


def reference_step_cpu_ms(model_path: str, rows: int, proto=None) -> float:
    """Thread CPU ms of the model's single-rank step now (`reference_runtime`, `step_cpu_ms`)."""
    return step_cpu_ms(reference_runtime(model_path, rows, proto))


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    print(f"{reference_step_cpu_ms(sys.argv[1], int(sys.argv[2])):.2f}")
