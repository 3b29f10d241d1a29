"""CPU quotas per emulated device: CFS bandwidth control, `quota / period` of one core.

cgroup v2 (``cpu.max`` = "QUOTA PERIOD") is used where the unified hierarchy offers the cpu controller;
otherwise cgroup v1 (``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``). Both are the same kernel
mechanism. A process joins a quota by writing its pid to the cgroup's ``cgroup.procs``; its children
inherit it. `CpuQuota.close()` moves any survivors back to the parent and removes the cgroups.
"""

from __future__ import annotations

import atexit
import os

V2_ROOT = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
V1_ROOT = "/sys/fs/cgroup/cpu"
PERIOD_US = 5_000  # short periods: a step of a few ms is throttled in slices, as a slower CPU would run it
# (at 20 ms a 6-9 ms step either fit one period's budget unthrottled or was stalled, and the median step of one plan
# jumped between the two: benchmarks/fidelity.md, "Emulated two-machine cluster, runs E1-E6")


def _v2_ok() -> bool:
    try:
        with open(os.path.join(V2_ROOT, "cgroup.controllers")) as f:
            return "cpu" in f.read().split()
    except OSError:
        return False


def available() -> tuple[bool, str]:
    """(True, 'v2'|'v1') when CPU quotas can be set here; else (False, why)."""
    if _v2_ok() and os.access(V2_ROOT, os.W_OK):
        return True, "v2"
    if os.path.exists(os.path.join(V1_ROOT, "cpu.cfs_quota_us")) and os.access(V1_ROOT, os.W_OK):
        return True, "v1"
    return False, "no writable cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us)"


class CpuQuota:
    """One cgroup per entry of `fractions` (share of one core, e.g. 0.5); `procs_file(i)` to join it."""

    def __init__(self, fractions: list[float], prefix: str | None = None):
        ok, self.version = available()
        if not ok:
            raise RuntimeError(self.version)
        self.prefix = prefix or f"tagfid{os.getpid()}"
        root = V2_ROOT if self.version == "v2" else V1_ROOT
        self.paths: list[str] = []
        atexit.register(self.close)
        for i, frac in enumerate(fractions):
            path = os.path.join(root, f"{self.prefix}-{i}")
            os.makedirs(path, exist_ok=True)
            self.paths.append(path)
            quota = max(1000, int(round(frac * PERIOD_US)))
            if self.version == "v2":
                _write(os.path.join(path, "cpu.max"), f"{quota} {PERIOD_US}")
            else:
                _write(os.path.join(path, "cpu.cfs_period_us"), str(PERIOD_US))
                _write(os.path.join(path, "cpu.cfs_quota_us"), str(quota))
        self.fractions = list(fractions)

    def procs_file(self, i: int) -> str:
        """The file a process writes its pid to (``echo $$ > FILE``) to run under quota i."""
        return os.path.join(self.paths[i], "cgroup.procs")

    def wrap(self, i: int, argv: list[str]) -> list[str]:
        """`argv` as a command that first joins quota i (a shell that enters the cgroup, then execs)."""
        import shlex
        return ["sh", "-c", f"echo $$ > {shlex.quote(self.procs_file(i))} && exec {shlex.join(argv)}"]

    def close(self) -> None:
        """Move leftover processes to the parent cgroup and remove every cgroup made here."""
        for path in self.paths:
            parent = os.path.join(os.path.dirname(path), "cgroup.procs")
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            _write(parent, pid)
                        except OSError:
                            pass
                os.rmdir(path)
            except OSError:
                pass
        self.paths = []


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
