"""Host memory settings of tag's processes: large CPU tensors on transparent huge pages.

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
