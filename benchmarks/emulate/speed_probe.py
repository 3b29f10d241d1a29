"""The machine's speed now, for one model: thread CPU ms of the deploy runtime's single-rank step at ROWS rows.

    python benchmarks/emulate/speed_probe.py MODEL.onnx ROWS OUT.json [READY_DIR N]

Other tenants of a shared machine slow even the CPU time of the same work (caches, memory bandwidth, SMT
siblings on the host). `tag profile ops` records the same figure in its ``step`` block
(`tag.profile.step.step_times`); the fidelity benchmark runs this probe next to its measurement and scales
the profile by probe / profile (`fidelity.speed_scale`). Writes {"rows": R, "step_cpu_ms": ms}.

With READY_DIR and N, N copies of the probe start their timed steps together (each marks itself ready in
READY_DIR and waits for the others): the model's step CPU time when every rank computes at once, which
memory-bound models (fc_wide) pay in thread CPU time (shared memory bandwidth and caches), compute-bound
ones barely (`fidelity.speed_scale`'s ``together`` figure).
"""

import json
import os
import sys
import time


def wait_for_peers(ready_dir: str, n: int, timeout_s: float = 300.0) -> None:
    """Mark this process ready in `ready_dir` and wait until `n` processes have (polls every 5 ms)."""
    os.makedirs(ready_dir, exist_ok=True)
    open(os.path.join(ready_dir, f"{os.getpid()}.ready"), "w").close()
    t0 = time.monotonic()
    while sum(f.endswith(".ready") for f in os.listdir(ready_dir)) < n:
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"only some of {n} speed probes got ready in {timeout_s} s")
        time.sleep(0.005)


if __name__ == "__main__":
    import onnx
    import torch

    torch.set_num_threads(1)
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.profile.step import step_times

    model, rows, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    graph = load_model(model, batch_size=rows, n_devices=1)
    gg = coarsen(graph, k=None, n_devices=1)
    proto = onnx.load(model)
    if len(sys.argv) > 5:
        wait_for_peers(sys.argv[4], int(sys.argv[5]))
    time.perf_counter_ns = time.thread_time_ns  # the clock `tag.profile.step` reads
    f, b, u, o = step_times(proto, graph, [list(g.op_ids) for g in gg.groups], rows, warmup=1, repeats=3,
                            seed=0, optimizer="adam", lr=1e-3)
    with open(out, "w") as fh:
        json.dump({"rows": rows, "step_cpu_ms": sum(f) + sum(b) + u + o}, fh)
