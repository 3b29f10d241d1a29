"""What a report shows, gathered once: the plan, its simulated iteration (with the trace) and every baseline's.

`gather` is the only place the report simulates: the plan with ``trace=True`` (the per-device timeline comes from
`SimResult.trace_events`) and each baseline of `tag.search.baselines` (or the ones the caller already simulated,
as `tag plan --report` passes them). The sections read `ReportData` and never simulate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class ReportData:
    """Everything the sections draw.

    group_ops[g]: op names of group g; plan: the plan.json object (its ``search`` block is read for the search
    section); result: the plan's SimResult with trace events; baselines: baseline name -> SimResult, in
    `tag.search.baselines.BASELINES` order.
    """

    model_path: str
    topology_path: str
    plan_path: str | None
    cluster: object
    strategy: object
    group_ops: list[list[str]]
    batch_size: int
    optimizer: str
    cost_model: str
    plan: dict
    result: object
    baselines: dict = field(default_factory=dict)
    precision: str = "fp32"

    @property
    def span_ms(self) -> float:
        """The timeline's length: the iteration time, or the time ignoring memory when the plan is OOM."""
        ms = self.result.iteration_ms
        return ms if math.isfinite(ms) else self.result.fit_iteration_ms


def gather(inp, strategy, plan: dict, plan_path: str | None = None, baselines: dict | None = None) -> ReportData:
    """Simulate `strategy` (trace on) and every baseline on `inp` (a `tag.modelio.Inputs`).

    baselines: name -> SimResult already simulated on the same inputs (skips re-simulating them), or None.
    """
    from tag.search.baselines import run_baselines
    from tag.sim import simulate

    gg = inp.gg
    result = simulate(gg, inp.cluster, inp.cost, strategy, inp.training, trace=True)
    if baselines is None:
        baselines = {name: res for name, (_, res) in run_baselines(gg, inp.cluster, inp.cost, inp.training).items()}
    ops = gg.graph.ops
    group_ops = [[ops[i].name for i in grp.op_ids] for grp in gg.groups]
    return ReportData(model_path=str(inp.model_path), topology_path=str(inp.topology_path), plan_path=plan_path,
                      cluster=inp.cluster, strategy=strategy, group_ops=group_ops, batch_size=inp.batch_size,
                      optimizer=inp.training.optimizer, cost_model=getattr(inp.cost, "name", ""), plan=plan,
                      result=result, baselines=dict(baselines), precision=inp.training.precision)
