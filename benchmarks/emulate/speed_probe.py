"""The machine's speed now, for one model: thread CPU ms of the deploy runtime's single-rank step at ROWS rows.

    python benchmarks/emulate/speed_probe.py MODEL.onnx ROWS OUT.json

Other tenants of a shared machine slow even the CPU time of the same work (caches, memory bandwidth, SMT
siblings on the host). `tag profile ops` records the same figure in its ``step`` block
(`tag.profile.step.step_times`); the fidelity benchmark runs this probe next to its measurement and scales
the profile by probe / profile (`fidelity.speed_scale`). Writes {"rows": R, "step_cpu_ms": ms}.
"""

import json
import sys
import time

if __name__ == "__main__":
    import onnx
    import torch

    torch.set_num_threads(1)
    time.perf_counter_ns = time.thread_time_ns  # the clock `tag.profile.step` reads
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.profile.step import step_times

    model, rows, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    graph = load_model(model, batch_size=rows, n_devices=1)
    gg = coarsen(graph, k=None, n_devices=1)
    f, b, u, o = step_times(onnx.load(model), graph, [list(g.op_ids) for g in gg.groups], rows, warmup=1, repeats=3,
                            seed=0, optimizer="adam", lr=1e-3)
    with open(out, "w") as fh:
        json.dump({"rows": rows, "step_cpu_ms": sum(f) + sum(b) + u + o}, fh)
