"""How much of the compute bound's headroom a plan could still reach (issue 24 must-show 3's reading).

For each MODEL:TOPOLOGY:PRECISION case: `tag plan`'s start + refine (`plan(..., playouts=0, sfb=False)`, the
ablation's start+refine column), then three lower bounds on its iteration time, all from the same cost model:

- own-rows floor: `tag.search.evaluate.compute_floor_ms` of the plan (max over devices of the forward and backward
  its row maps give each device): no plan with these row maps is faster;
- dp-split floor: min over row splits r_d (sum r_d = B) of max_d T_d(r_d), T_d(r) the whole model's forward and
  backward at r rows on device d, by bisection on the time (T_d increasing in r): no data-parallel plan is faster;
- compute bound: `tag.bench.ideal.compute_bound`, 1 / sum_d (1 / T_d(B)), every device at full-batch speed.

Run: `python benchmarks/ablate_floors.py resnet50:modern8:bf16 gpt2_medium:tag16:fp32 ...`
"""

from __future__ import annotations

import os
import sys

from tag.bench.ideal import compute_bound
from tag.modelio import ModelOptions, load_inputs
from tag.search.evaluate import compute_floor_ms
from tag.search.planner import plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dp_split_floor_ms(gg, cluster, cost, batch: int) -> float:
    """min over integer row splits of max_d T_d(r_d) (module docstring), to 40 bisection steps."""
    types = [d.type for d in cluster.devices]
    memo: dict = {}

    def whole_ms(i: int, rows: int) -> float:
        key = (types[i].name, rows)
        if key not in memo:
            memo[key] = 0.0 if rows <= 0 else sum(cost.group_fwd_ms(g.id, types[i], rows)
                                                 + cost.group_bwd_ms(g.id, types[i], rows) for g in gg.groups)
        return memo[key]

    def rows_within(i: int, t: float) -> int:
        lo, hi = 0, batch
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if whole_ms(i, mid) <= t else (lo, mid - 1)
        return lo

    lo, hi = 0.0, min(whole_ms(i, batch) for i in range(len(types)))
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if sum(rows_within(i, mid) for i in range(len(types))) >= batch else (mid, hi)
    return hi


def main(cases: list[str]) -> None:
    print("| case | start+refine ms | own-rows floor ms | dp-split floor ms | compute bound ms | plan / own floor |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        model, topo, precision = case.split(":")
        inp = load_inputs(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"),
                          os.path.join(ROOT, "datasets", "topologies", f"{topo}.json"), ModelOptions(precision=precision))
        gg, cluster, cost, training = inp.gg, inp.cluster, inp.cost, inp.training
        res = plan(gg, cluster, cost, training, playouts=0, sfb=False)
        batch = gg.graph.batch_size
        own = compute_floor_ms(gg, cluster, cost, res.strategy)
        print(f"| {model} on {topo} ({precision}) | {res.result.iteration_ms:.2f} | {own:.2f} | "
              f"{dp_split_floor_ms(gg, cluster, cost, batch):.2f} | "
              f"{compute_bound(gg, cluster, cost, batch).iteration_ms:.2f} | "
              f"{res.result.iteration_ms / own if own > 0 else float('nan'):.2f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
