"""Host memory settings of tag's processes: big CPU tensors on huge pages, freed memory kept for the next step.

A CPU training step allocates its big tensors (activations, gradients, optimizer temporaries, sync buckets)
afresh every step. glibc serves allocations above its mmap threshold (at most 32 MiB) with fresh mappings,
and the kernel then faults them in one 4 KiB page at a time on first touch: measured here (2 cores, VM),
``torch.cat`` into a 34 MB buffer took 24-35 ms in that regime and 6 ms on huge pages, and which regime a
process is in depended on its allocation history, so the same step differed by 30 % between the profiler
and the deploy workers (`benchmarks/fidelity.md`). PyTorch's CPU allocator asks for huge pages
(``madvise(MADV_HUGEPAGE)`` on 2 MiB-aligned blocks of 2 MiB or more) when ``THP_MEM_ALLOC_ENABLE=1`` is in
the environment when torch is imported; `use_huge_pages` sets it for this process and everything it starts
(``tag profile ops`` and ``tag deploy``'s ranks time and run the step under the same setting).

The user's own value wins (``THP_MEM_ALLOC_ENABLE=0`` turns it off), and nothing is set where the kernel has
no transparent huge pages or has them disabled.

Huge pages cover blocks of 2 MiB and more only. The rest of a step's tensors still come and go through glibc:
blocks under its mmap threshold from the heap, whose free top above ``M_TRIM_THRESHOLD`` glibc hands back to the
kernel on every free, and larger ones (the threshold adapts up to 32 MiB) from mappings unmapped on free. Either way
the next step touches fresh pages again. `keep_freed_memory` fixes the mmap threshold at 32 MiB (glibc's largest)
and the trim threshold at 2^31 - 1 bytes (mallopt's largest), so a step's freed tensors stay in the process for the
next step: a freshly started rank then runs the step as the long-lived `tag profile ops` process timed it (the
page faults a step, with and without: benchmarks/fidelity.md, "Runs U-Z: memory between steps"). It is set for
this process (``mallopt``) and for everything it starts (glibc's ``MALLOC_MMAP_THRESHOLD_`` /
``MALLOC_TRIM_THRESHOLD_``, read at a process's start). The user's own values win; nothing is done where the C
library is not glibc.
"""

from __future__ import annotations

import os

ENV = "THP_MEM_ALLOC_ENABLE"
THP_SYSFS = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP_SYSFS) -> str | None:
    """The kernel's transparent huge page mode ("always", "madvise" or "never"), None without THP."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def use_huge_pages(env: dict | None = None, mode: str | None = "auto") -> bool:
    """Set ``THP_MEM_ALLOC_ENABLE=1`` in `env` (default: this process's environment) unless it is already set or
    the kernel's THP mode (`thp_mode`, read when `mode` is "auto") is absent or "never". Effective only before
    torch is imported in the process that reads `env`. Returns whether huge pages are requested."""
    env = os.environ if env is None else env
    if ENV in env:
        return env[ENV] == "1"
    mode = thp_mode() if mode == "auto" else mode
    if mode not in ("always", "madvise"):
        return False
    env[ENV] = "1"
    return True


# the largest values glibc's mmap threshold and mallopt's int take
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": 32 * 2**20, "MALLOC_TRIM_THRESHOLD_": 2**31 - 1}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def _glibc():
    """glibc's handle, or None (another C library, or no ctypes)."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_freed_memory(env: dict | None = None, libc="auto") -> bool:
    """Keep freed CPU memory in the process (module docstring): set `MALLOC_ENV` in `env` (default: this process's
    environment, which the processes it starts inherit) where the user has not, and apply the same values to this
    process with ``mallopt`` when `env` is the process's own. `libc`: "auto" (glibc found by `_glibc`), None (no
    glibc: nothing is done), or an object with a ``mallopt(param, value)`` method. Returns whether it was set."""
    lib = _glibc() if libc == "auto" else libc
    if lib is None:
        return False
    own = env is None
    env = os.environ if own else env
    mine = {k: v for k, v in MALLOC_ENV.items() if k not in env}
    for k, v in mine.items():
        env[k] = str(v)
    if own:
        params = {"MALLOC_MMAP_THRESHOLD_": _M_MMAP_THRESHOLD, "MALLOC_TRIM_THRESHOLD_": _M_TRIM_THRESHOLD}
        for k in mine:
            lib.mallopt(params[k], MALLOC_ENV[k])
    return True
