"""The benchmark's CPU share against other sessions' processes (Linux autogroup scheduling).

With ``kernel.sched_autogroup_enabled = 1`` the scheduler shares the CPU equally between sessions first and only then
by nice inside a session: a nice-19 job started in a session of its own takes a whole core from a benchmark whose
torchrun ranks each start a new session (torch's elastic agent starts every worker with ``start_new_session``).
Measured on the 2-core VM with such a job running (2026-11-26 11:51 UTC): two one-thread spinners at once ran
x2.02-2.13 wall per CPU second, x1.03 with their session's autogroup at nice -20; the contention probe's
together_stretch x1.98 and x1.003 likewise.

`apply_from_env()` writes ``$TAG_AUTOGROUP_NICE`` (when set) into this process's ``/proc/self/autogroup``: each rank's
own session then weighs as a nice-N session against the others. The ranks of `tag profile links`
(`tag.profile.links_worker`) and of the fidelity benchmark (`benchmarks/emulate/batch_worker.py`) call it; the
benchmark sets it for everything it starts with ``--autogroup-nice N`` (needs root for N < 0) and says so in the
figures it prints. Unset (every user's default), nothing changes.
"""

from __future__ import annotations

import os

ENV = "TAG_AUTOGROUP_NICE"


def apply_from_env() -> int | None:
    """Set this session's autogroup nice from ``$TAG_AUTOGROUP_NICE``; the value set, or None (unset, or the kernel
    has no autogroup file)."""
    raw = os.environ.get(ENV)
    if raw is None or raw == "":
        return None
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(int(raw)))
    except OSError:
        return None
    return int(raw)
