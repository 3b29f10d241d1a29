"""The CPU quota this process runs under: Linux CFS bandwidth control, in cores (a container's CPU limit).

A process in a cgroup with a CFS quota gets at most ``quota / period`` cores of CPU time per period, summed over
its threads. Thread CPU time does not count the periods it was throttled, so op times taken on the thread clock
(`tag.profile.timing`) hold the work, not the wall it takes under the limit; `tag profile ops` records the quota
beside them (the profile's ``cpu_quota_cores``) and the cost model divides every compute and update time on the
profile's device type by it when it is below one core (`tag.cost.profile_types.quota_scale`).

The effective quota is the smallest along the cgroup path (a child cannot exceed its parents):

* cgroup v2 (the ``0::/path`` line of /proc/self/cgroup): ``cpu.max`` = "QUOTA PERIOD" or "max PERIOD" in
  ``<root>/path`` and each ancestor;
* cgroup v1 (a line whose controllers include ``cpu``): ``cpu.cfs_quota_us`` (-1: none) over ``cpu.cfs_period_us``
  in ``<root>/cpu/path`` (or ``cpu,cpuacct``) and each ancestor.

None when no quota applies (or the files are not there: not Linux, no cgroup mount).
"""

from __future__ import annotations

import os

CGROUP_ROOT = "/sys/fs/cgroup"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _ancestors(root: str, rel: str) -> list[str]:
    """`root`/`rel` and every directory above it up to `root`, deepest first."""
    parts = [p for p in rel.strip("/").split("/") if p]
    return [os.path.join(root, *parts[:k]) for k in range(len(parts), -1, -1)]


def _v2_cores(directory: str) -> float | None:
    text = _read(os.path.join(directory, "cpu.max"))
    if not text:
        return None
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = float(fields[0]), float(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_cores(directory: str) -> float | None:
    quota, period = _read(os.path.join(directory, "cpu.cfs_quota_us")), _read(os.path.join(directory, "cpu.cfs_period_us"))
    try:
        q, p = float(quota), float(period)
    except (TypeError, ValueError):
        return None
    return q / p if q > 0 and p > 0 else None


def cpu_quota_cores(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT) -> float | None:
    """The smallest CFS quota along this process's cgroup path, in cores, or None (module docstring).

    `proc_cgroup` and `root` are the files to read (tests point them at a fake tree)."""
    text = _read(proc_cgroup)
    if not text:
        return None
    found: list[float] = []
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, rel = fields
        if controllers == "":
            dirs = _ancestors(root, rel) + _ancestors(os.path.join(root, "unified"), rel)
            found += [c for c in map(_v2_cores, dirs) if c is not None]
        elif "cpu" in controllers.split(","):
            for mount in (controllers, "cpu", "cpu,cpuacct"):
                base = os.path.join(root, mount)
                if os.path.isdir(base):
                    found += [c for c in map(_v1_cores, _ancestors(base, rel)) if c is not None]
                    break
    return min(found) if found else None
