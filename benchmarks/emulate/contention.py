"""The contention term of the fidelity benchmark: how a plan's concurrency and the machine's other tenants stretch
its compute (`benchmarks/fidelity.py`'s ``pred contention`` column), from the handoff and speed probes."""

from __future__ import annotations


def concurrency(res) -> tuple[float, int]:
    """(c, n): the mean number of the plan's n devices computing at once, (sum of busy time) / iteration time,
    clamped to 1..n (n at least 2)."""
    busy = list(res.busy_ms.values()) if isinstance(res.busy_ms, dict) else list(res.busy_ms)
    n = max(len(busy), 2)
    c = min(max(sum(busy) / res.iteration_ms, 1.0), float(n)) if res.iteration_ms > 0 else 1.0
    return c, n


def concurrent_speed(res, alone: float, together: float | None) -> float:
    """The CPU-time scale of compute under the plan's concurrency: ``alone + (c - 1) / (n - 1) x (together -
    alone)`` (`concurrency`); `alone` when `together` is None."""
    if together is None:
        return alone
    c, n = concurrency(res)
    return alone + (c - 1) / (n - 1) * (together - alone)


def contention_stretch(res, contention: dict, n_types: int) -> list[float]:
    """Compute stretch per profile (device type) under contention: a mean field between the probe's figures.

    With c = (sum of the devices' busy time) / iteration time, the mean number of this job's ranks computing
    at once (1..n), every task is stretched by ``alone + (c - 1) / (n - 1) x (together - alone)``: `alone`
    when one rank computes while the others wait, `together` when all compute at once (processor sharing
    with each other and with other tenants; one figure per rank of the probe).
    """
    c, n = concurrency(res)
    alone, together = contention["alone_stretch"], contention["together_stretch"]
    if len(alone) != n_types:  # one device type for all ranks: the ranks' mean figures
        alone, together = [sum(alone) / len(alone)] * n_types, [sum(together) / len(together)] * n_types
    return [a + (c - 1) / (n - 1) * (t - a) for a, t in zip(alone, together)]


def probe_mean(probes: list[dict]) -> dict:
    """Mean of several contention probes: handoff ms, and per rank the alone and together stretches."""
    n = len(probes)
    ranks = range(len(probes[0]["alone_stretch_by_rank"]))
    return {"handoff_ms": sum(p["handoff_ms"] for p in probes) / n,
            "alone_stretch": [sum(p["alone_stretch_by_rank"][i] for p in probes) / n for i in ranks],
            "together_stretch": [sum(p["sustained_stretch_by_rank"][i] for p in probes) / n for i in ranks]}
