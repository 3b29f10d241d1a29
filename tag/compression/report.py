"""Human-readable lines for the SFB part of the plan report."""

from __future__ import annotations


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f} MB"


def sfb_summary(report: dict) -> list[str]:
    """Lines describing an SFB report from `select_sfb` (empty when SFB chose nothing and saw no candidate).

    >>> sfb_summary({"ops": ["fc"], "candidates": 2, "ms_saved": 1.5, "bytes_saved": 2e6,
    ...              "iteration_ms_without": 10.0, "iteration_ms_with": 8.5,
    ...              "per_group": [{"group": 3, "ops": ["fc"], "replicas": 4, "weight_bytes": 4e6, "factor_bytes": 1e6}]})
    ['SFB: 1 of 2 eligible op(s), 10.000 -> 8.500 ms per iteration (1.500 ms saved), 2.00 MB fewer link bytes', '  group 3 (4 replicas): fc: all-reduce -4.00 MB of weights, all-gather +1.00 MB of factors']
    """
    if not report:
        return []
    ops, n = report.get("ops", []), report.get("candidates", 0)
    if not ops:
        why = " (the simulator found the model's choice slower)" if report.get("rejected") else ""
        return [f"SFB: no op chosen of {n} eligible{why}"] if n else ["SFB: no eligible op"]
    saved_b = report.get("bytes_saved", 0.0)
    word = "fewer" if saved_b >= 0 else "more"
    lines = [f"SFB: {len(ops)} of {n} eligible op(s), {report['iteration_ms_without']:.3f} -> "
             f"{report['iteration_ms_with']:.3f} ms per iteration ({report['ms_saved']:.3f} ms saved), "
             f"{_mb(abs(saved_b))} {word} link bytes"]
    for pg in report.get("per_group", []):
        lines.append(f"  group {pg['group']} ({pg['replicas']} replicas): {', '.join(pg['ops'])}: all-reduce "
                     f"-{_mb(pg['weight_bytes'])} of weights, all-gather +{_mb(pg['factor_bytes'])} of factors")
    return lines
