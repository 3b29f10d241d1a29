"""The profile database's data: measured op, group and step times per device type (`tag.cost.profile_db` reads and
writes them as JSON, whose format its docstring gives), and the pure figures read off them: interpolation between
measured row counts, the step block's whole step, the CPU-quota factor.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from tag.cost.contention import ContentionTerms


@dataclass
class OpProfile:
    """Measured times of one op signature: row counts (increasing) and ms per row count."""

    rows: list[int]
    fwd_ms: list[float]
    bwd_ms: list[float] | None = None


@dataclass
class GroupProfile:
    """A measured run of a set of ops (a group): its times and the sums of its ops' own figures, ms."""

    ops: list[str]
    rows: list[int]
    fwd_ms: list[float]
    bwd_ms: list[float]
    ops_fwd_ms: list[float] | None = None
    ops_bwd_ms: list[float] | None = None


@dataclass
class StepGroup:
    """One group measured inside the deploy runtime's step: fwd and bwd ms per row count of the step
    profile, the optimizer step over its parameters alone (ms) and their bytes."""

    ops: list[str]
    fwd_ms: list[float]
    bwd_ms: list[float]
    update_ms: float = 0.0
    param_bytes: int = 0


@dataclass
class StepProfile:
    """The deploy runtime's step on one rank (`tag.profile.step`): per row count the in-step group times,
    the optimizer step and the rest of the step; sync-bucket copy times by bucket bytes. ms throughout."""

    optimizer: str
    rows: list[int]
    groups: list[StepGroup]
    update_ms: list[float]
    other_ms: list[float]
    copy_bytes: list[int] = field(default_factory=list)
    copy_in_ms: list[float] = field(default_factory=list)
    copy_out_ms: list[float] = field(default_factory=list)
    fill_ms: list[float] = field(default_factory=list)  # a fresh zeroed buffer of copy_bytes[i] bytes ([]: not measured)


@dataclass
class ProfileDB:
    """A loaded profile file (see the module docstring for the JSON format)."""

    device_type: str
    threads: int = 1
    machine: dict = field(default_factory=dict)
    ops: dict[str, OpProfile] = field(default_factory=dict)
    path: str = ""
    groups: list[GroupProfile] = field(default_factory=list)
    dispatch_ms: float | None = None  # per-op launch/dispatch overhead estimate
    settings: dict = field(default_factory=dict)  # how the figures were measured (free-form)
    step: StepProfile | None = None  # the deploy runtime's step (`tag.profile.step`), when measured
    contention: ContentionTerms | None = None  # ranks at once on this machine (`tag.profile.contention`)
    contention_raw: dict = field(default_factory=dict)  # the block as read (provenance figures kept on save)
    cpu_quota_cores: float | None = None  # the CFS quota the thread-clock times were taken under (`tag.profile.quota`)

    @property
    def name(self) -> str:
        """Short name for provenance: the file stem, else the device type."""
        import os
        return os.path.splitext(os.path.basename(self.path))[0] if self.path else self.device_type


def interpolate(rows_measured: list[int], times_ms: list[float], rows: float) -> float:
    """Time at `rows` by piecewise-linear interpolation of measured (rows, ms) points, ms.

    >>> interpolate([1, 2, 4], [1.0, 2.0, 3.0], 3), interpolate([1, 2, 4], [1.0, 2.0, 3.0], 8)
    (2.5, 5.0)
    """
    xs, ys = rows_measured, times_ms
    if len(xs) == 1:
        return max(ys[0] * rows / xs[0], 0.0)
    i = bisect.bisect_left(xs, rows)
    if i < len(xs) and xs[i] == rows:
        return max(ys[i], 0.0)
    lo = min(max(i - 1, 0), len(xs) - 2)  # segment [lo, lo+1]; the end segments extrapolate
    x0, x1, y0, y1 = xs[lo], xs[lo + 1], ys[lo], ys[lo + 1]
    return max(y0 + (y1 - y0) * (rows - x0) / (x1 - x0), 0.0)


def step_block_ms(step: StepProfile | None, rows: int) -> float | None:
    """The step block's whole single-rank step at `rows` rows, ms: every group's fwd + bwd, the optimizer step and
    the rest of the step, each interpolated between measured row counts; None without a step block or when `rows`
    lies outside its row counts (no extrapolation: the figure calibrates the block against a measured step).

    >>> st = StepProfile("adam", [8, 16], [StepGroup(["a"], [1.0, 2.0], [2.0, 4.0])], [0.5, 0.5], [0.1, 0.3])
    >>> step_block_ms(st, 12), step_block_ms(st, 32)
    (5.2, None)
    """
    if step is None or not step.rows or not step.rows[0] <= rows <= step.rows[-1]:
        return None
    total = sum(interpolate(step.rows, g.fwd_ms, rows) + interpolate(step.rows, g.bwd_ms, rows) for g in step.groups)
    return total + interpolate(step.rows, step.update_ms, rows) + interpolate(step.rows, step.other_ms, rows)


def quota_scale(cpu_quota_cores: float | None) -> float:
    """1 / q for a profile taken under a CPU quota of q < 1 cores (``cpu_quota_cores``), else 1: what the cost model
    divides by q (`tag.cost.profiled`) and the contention stretches already hold (`tag.cost.contention`).

    >>> quota_scale(0.25), quota_scale(2.0), quota_scale(None)
    (4.0, 1.0, 1.0)
    """
    q = cpu_quota_cores
    return 1.0 / q if q is not None and 0 < q < 1 else 1.0
