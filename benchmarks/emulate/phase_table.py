"""The fidelity benchmark's per-phase table: the simulator's tasks per device next to the deploy runtime's
phase timers (`emulate.phases`, recorded by `emulate.batch_worker` as ``phases_by_rank``)."""

from __future__ import annotations


def predict_phases(model: str, topo: str, plan: str, profile: str) -> dict[int, dict[str, float]]:
    """Per device index: the simulated compute per phase (``fwd``, ``bwd``, ``update`` ms; deploy-mode sync)."""
    from tag.cost.profile_db import load
    from tag.cost.profiled import ProfileCostModel
    from tag.modelio import load_inputs
    from tag.sim import simulate

    inp = load_inputs(model, topo, plan_path=plan)
    cost = ProfileCostModel(inp.gg, inp.training, load(profile))
    res = simulate(inp.gg, inp.cluster, cost, inp.strategy, inp.training, overlap_sync=False, blocking_sends=True, trace=True)
    out: dict[int, dict[str, float]] = {}
    for e in res.trace_events:
        if e.get("ph") == "X" and e["pid"] == 0:
            d = out.setdefault(e["tid"], {"fwd": 0.0, "bwd": 0.0, "update": 0.0})
            if e["cat"] in d:  # (rendezvous waits and other task kinds are not phases)
                d[e["cat"]] += e["dur"] / 1e3
    return out


def phase_line(model: str, strategy: str, pred: dict[int, dict[str, float]], phases_by_rank: list) -> str:
    """A markdown row: the busiest rank's predicted and measured (thread CPU) ms per phase, and its message waits."""
    if not phases_by_rank or any(p is None for p in phases_by_rank):
        return ""
    busiest = max(range(len(phases_by_rank)), key=lambda r: sum(phases_by_rank[r]["cpu"].values()))
    p, c, w = pred.get(busiest, {}), phases_by_rank[busiest]["cpu"], phases_by_rank[busiest]["wall"]
    comm = w["fwd_comm"] + w["bwd_comm"] + w["sync_comm"]
    return (f"| {model} | {strategy} | {busiest} | {p.get('fwd', 0):.1f} / {c['fwd']:.1f} | {p.get('bwd', 0):.1f} / "
            f"{c['bwd'] + c['other']:.1f} | {p.get('update', 0):.1f} / {c['update']:.1f} | {c['sync']:.1f} | {comm:.1f} |")


def phase_report(lines: list[str]) -> str:
    """The per-phase table (`emulate.phases` in the batch worker next to the simulator's tasks)."""
    lines = [x for x in lines if x]
    if not lines:
        return ""
    return "\n".join(["", "### Per phase (busiest rank): predicted / measured thread CPU ms", "",
                      "`bwd` measured includes the rest of the step (freeing its tensors, zeroing grads), which the "
                      "model charges to backward; `sync copy` = the runtime's own work in the gradient sync besides "
                      "the collectives (thread CPU; ~0 since buckets are flat gradient buffers); `msg wait` = wall "
                      "time in every message call (exchange, collectives).", "",
                      "| model | strategy | rank | fwd | bwd | update | sync copy | msg wait |",
                      "|---|---|---:|---:|---:|---:|---:|---:|", *lines]) + "\n"
