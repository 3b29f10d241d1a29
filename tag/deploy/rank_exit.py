"""End a process that ran as a gloo/NCCL rank, once its work is done and written.

Such a process sometimes aborts *after* its Python code has returned: ``terminate called without an active
exception`` (SIGABRT, no Python frame), from torch.distributed's C++ objects torn down while the interpreter exits.
Its launcher (torchrun, or `torch.multiprocessing`'s spawn) then reports the rank as crashed although every result
was written. `exit_rank` flushes Python's streams and ends the process with the given status without running that
teardown (``os._exit``). Call it last, after ``dist.destroy_process_group()``; in a spawned rank call it on success
only, so that a failing rank raises and the spawner reports its error.
"""

from __future__ import annotations

import os
import sys


def exit_rank(status: int = 0) -> None:
    """Flush stdout/stderr and end this rank's process with `status` (never returns)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed stream has nothing left to write
            pass
    os._exit(status)
