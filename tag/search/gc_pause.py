"""`gc_paused`: Python's cyclic garbage collector switched off for the duration of a search.

The search allocates millions of short-lived objects (task graphs, flows, stage rows) and keeps growing caches
(the evaluator's results, the pipeline DP's memos), so the collector's generation-2 passes, each a walk over every
tracked object of the process (torch and onnx included), ran 5-7 times inside one `tag plan` and cost ~1 s of its
CPU while freeing a few hundred objects (benchmarks/plan_time.md, part 12). Reference counting still frees every
object that is not in a cycle at once; the few cycles made during the search are freed by the first collection
after it. Nothing the search computes depends on when the collector runs, so plans are unchanged. `tag plan`'s
run() is paused as a whole (loading the model and the networks: ~0.3 s more).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """Disable the cyclic collector inside the block; re-enable it afterwards (also on an exception) only if it was
    enabled before, so nested pauses and a caller's own `gc.disable()` are respected."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
