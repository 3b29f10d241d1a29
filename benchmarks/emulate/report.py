"""The fidelity benchmark's markdown: per plan rows, per model and overall MAPE and Kendall tau-b."""

from __future__ import annotations

from dataclasses import dataclass


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b of two equal-length sequences (ties counted as in scipy.stats.kendalltau), in [-1, 1].

    >>> kendall_tau_b([1, 2, 3], [1, 3, 2])
    0.3333333333333333
    """
    conc = disc = tx = ty = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    return (conc - disc) / denom if denom else float("nan")


def mape(pred: list[float], meas: list[float]) -> float:
    """Mean absolute percentage error of `pred` against `meas`, in percent."""
    return 100.0 * sum(abs(p - m) / m for p, m in zip(pred, meas)) / len(meas)


@dataclass
class Row:
    """One plan: three predictions and the measured ms. Loopback (`report`): the product path (what `tag deploy`
    prints), the planner's mode, the product path x the benchmark-only drift; emulated cluster (`emulated_report`):
    the product path, the planner's mode, deploy mode with the benchmark-only contention probe."""

    model: str
    strategy: str
    pred_ms: float
    pred_overlap_ms: float
    pred_contention_ms: float
    measured_ms: float
    cpu_ms: float


def _summary(rows: list[Row], label: str) -> str:
    """One summary line: plans, then MAPE % and tau-b of each of the three predictions."""
    q = [r.measured_ms for r in rows]
    cells = [label, str(len(rows))]
    for attr in ("pred_ms", "pred_overlap_ms", "pred_contention_ms"):
        p = [getattr(r, attr) for r in rows]
        cells += [f"{mape(p, q):.1f}", f"{kendall_tau_b(p, q):.2f}"]
    return "| " + " | ".join(cells) + " |"


LOCAL = ("product", "planner", "product x drift")
EMULATED = ("product", "planner", "bench contention")


def report(rows: list[Row], a, load_before: str, load_after: str, probes: dict, seconds: float) -> str:
    """The markdown table: per plan rows, then per model and overall MAPE and Kendall tau-b. `probes`: per model
    the contention block of its profile."""
    lines = ["# Fidelity: predicted vs measured step time", "",
             f"`python benchmarks/fidelity.py --models {a.models} --nproc {a.nproc} --random {a.random} "
             f"--steps {a.steps} --rounds {a.rounds} --batch-size {a.batch_size} --pipeline-models '{a.pipeline_models}' "
             f"--pipeline-micro {a.pipeline_micro} --memory-models '{a.memory_models}'`", "",
             f"{a.nproc} local cpu ranks (one thread each) on loopback; topology from `tag profile links`, op times "
             f"and contention from `tag profile ops` (thread CPU clock, `--ranks {a.nproc}`), each model profiled right "
             f"before it is measured; load average (1/5/15 min) before {load_before}, after {load_after}; "
             f"{seconds / 60:.1f} min. Contention blocks (handoff ms, stretch alone / together, step CPU together / "
             "alone): " + ", ".join(f"{m} {p.get('handoff_ms', 0):.2f} / x{p.get('alone_stretch', 1):.3f} / "
                                    f"x{p.get('together_stretch', 1):.3f} / x{p.get('together_speed', 1):.3f}"
                                    for m, p in probes.items()) + ".", "",
             "Columns: `product` = what `tag deploy` prints beside its measured step (`tag.cli.deploy.predict_as_run`: "
             "the plan re-simulated for the ranks it runs with its recorded profile's cost model, blocking exchanges, "
             "bucket sums overlapping the backward (after it when the ranks fill the profile's cores), collectives "
             "at the rate and the barrier `tag profile links` measured (at least one all-reduce call after compute), "
             "and the profile's contention terms, `tag.cost.contention`); `planner` = the same cost model "
             "in the planner's mode (asynchronous sends, no contention, no barrier); `product x drift` = `product` "
             "with compute scaled by the benchmark-only drift below (how much faster or slower the machine ran the "
             "model's reference step while measuring than when profiling); `measured` = median wall step of the "
             "deploy runtime; `cpu` = largest per-rank thread CPU time per step.", ""]
    return "\n".join(lines + _tables(rows, "**all**", always=True, labels=LOCAL)) + "\n"


def emulated_report(rows: list[Row], info: dict, load_before: str, load_after: str) -> str:
    """The emulated cluster's section: what was emulated, per plan rows and the summary."""
    lines = ["", "## Emulated heterogeneous cluster", "",
             f"One rank per network namespace; NICs shaped with tc tbf to {info['nic_mbit']} Mbit/s (probe m0->m1: "
             f"{info.get('probe_mbit_0to1', float('nan')):.1f} Mbit/s goodput); CPU quotas {info['quotas']} of a core "
             f"(cgroup {info['cgroup']}); link delay: {info['delay']}. Topology from `tag profile links` run as one "
             "rank per machine across the namespaces (machine i `--device-type cpu-m<i>`); each machine's ops profiled "
             "under its quota (`tag profile ops --device-type cpu-m<i> --clock thread`, the quota recorded as `cpu_quota_cores`), joined into one profile set that the plans "
             "record (`tag plan --profile SET`). Columns: `product` = what `tag deploy` prints "
             "(`tag.cli.deploy.predict_as_run`); `planner` = the planner's mode; `bench contention` = the benchmark-only "
             f"contention probe across the namespaces: handoff {info['handoff_ms']:.2f} ms, compute stretch per device "
             f"alone {[round(x, 2) for x in info['alone_stretch']]}, all at once "
             f"{[round(x, 2) for x in info['together_stretch']]}. Load before {load_before}, after {load_after}.", ""]
    return "\n".join(lines + _tables(rows, "**all (emulated)**", always=False, labels=EMULATED)) + "\n"


def _tables(rows: list[Row], all_label: str, always: bool, labels: tuple[str, str, str]) -> list[str]:
    """Markdown lines: the per-plan table, then MAPE and tau per model and over all rows (`all_label`; with no rows
    only when `always`). `labels` name the three predictions; the error column is the first's (the product path)."""
    lines = [f"| model | strategy | {labels[0]} ms | {labels[1]} ms | {labels[2]} ms | measured ms | cpu ms | err ({labels[0]}) % |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        err = r.pred_ms - r.measured_ms
        lines.append(f"| {r.model} | {r.strategy} | {r.pred_ms:.2f} | {r.pred_overlap_ms:.2f} | {r.pred_contention_ms:.2f} | "
                     f"{r.measured_ms:.2f} | {r.cpu_ms:.2f} | {100 * err / r.measured_ms:+.1f} |")
    lines += ["", "| model | plans | " + " | ".join(f"MAPE % {x} | tau {x}" for x in labels) + " |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in dict.fromkeys(r.model for r in rows):
        lines.append(_summary([r for r in rows if r.model == m], m))
    if rows or always:
        lines.append(_summary(rows, all_label))
    return lines
