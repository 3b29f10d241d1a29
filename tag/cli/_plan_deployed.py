"""`tag plan`'s last step on a profiled local machine: pick, among the searched plan and the baselines, the one
`tag deploy` is predicted to run fastest.

The search scores strategies with the simulator as a cluster runs them (bucket sums overlapping the backward,
non-blocking sends). When the profile carries contention terms (`tag profile ops` measured the ranks of this
machine sharing its cores, `tag.cost.contention`), `tag deploy` predicts the step differently: blocking exchanges,
bucket sums after the backward when the ranks fill the cores, compute stretched at the plan's concurrency, and the
fence that ends each step. Plans that gain from overlap (a parameter server for one group, several buckets) can then
run slower than a plain baseline. Here every finalist F (the searched plan, then each baseline that fits, the
simulator's fastest pipeline candidate and shard candidate that fit) gets
``T_dep(F)`` = `tag.cli._as_deployed.as_deployed_step` on n ranks (one per plan device, as `tag deploy` runs by
default), and the plan is ``argmin T_dep`` (ties keep the earlier: the searched plan first). Without contention
terms (a GPU profile, or the roofline), or on a cluster with any GPU, nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class DeployedChoice:
    """ranks: the ranks the prediction assumes; step_ms: finalist name -> its predicted step as deployed, ms
    ("plan" is the searched plan); chosen: the finalist with the least."""

    ranks: int
    step_ms: dict
    chosen: str

    def to_json(self) -> dict:
        return {"ranks": self.ranks, "step_ms": {k: round(v, 4) for k, v in self.step_ms.items()},
                "chosen": self.chosen}


def choose_as_deployed(res, inp, topology_path: str):
    """(res, DeployedChoice or None): `res` (a `PlanResult` that fits) with its strategy replaced by the finalist
    of least predicted deployed step (method ``...+as-deployed:NAME``), or unchanged; None when the cost model has no
    contention terms or the cluster has a device that is not a CPU."""
    from tag.cli._as_deployed import as_deployed_step

    if getattr(inp.cost, "contention", None) is None or res.result.oom or \
            any(d.type.kind != "cpu" for d in inp.cluster.devices):  # GPU ranks: the CPU probe's terms do not apply
        return res, None
    ranks = inp.cluster.n_devices
    finalists = [("plan", res.strategy, res.result)] + [(name, s, r) for name, (s, r) in res.baselines.items()
                                                        if not r.oom]
    for pool in (res.candidates, res.shard_candidates):  # the fastest pipeline and shard candidate that fit
        fits = [(name, s, r) for name, (s, r) in (pool or {}).items() if not r.oom]
        if fits:
            finalists.append(min(fits, key=lambda f: f[2].iteration_ms))
    step_ms = {}
    for name, strategy, _ in finalists:
        step, _missing = as_deployed_step(inp, strategy, ranks, topology_path)
        step_ms[name] = float(step.step_ms)
    name, strategy, result = min(finalists, key=lambda f: step_ms[f[0]])  # min keeps the first of equals
    choice = DeployedChoice(ranks, step_ms, name)
    if name == "plan":
        return res, choice
    return replace(res, strategy=strategy, result=result, method=f"{res.method}+as-deployed:{name}", sfb={},
                   memory={}), choice


def written_ms(choice: DeployedChoice) -> dict:
    """name -> predicted deployed step for `tag plan`'s table: "plan" is the plan written (the chosen finalist),
    each other finalist under its own name."""
    out = {k: v for k, v in choice.step_ms.items() if k != "plan"}
    out["plan"] = choice.step_ms[choice.chosen]
    return out


def deployed_lines(choice: DeployedChoice | None) -> list[str]:
    """The lines `tag plan` prints after its table for a `DeployedChoice` (none for None)."""
    if choice is None:
        return []
    head = (f"as deployed: the step tag deploy predicts on {choice.ranks} ranks of this machine (the profile's "
            "contention terms: blocking exchanges, bucket sums after the backward when the ranks fill the cores)")
    if choice.chosen == "plan":
        return ["", head, "the searched plan is the fastest as deployed"]
    return ["", head, f"wrote {choice.chosen} ({choice.step_ms[choice.chosen]:.2f} ms as deployed): the searched plan "
                      f"is faster in the simulator but {choice.step_ms['plan']:.2f} ms as deployed "
                      "(--no-as-deployed keeps it)"]
