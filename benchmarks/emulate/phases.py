"""Per-phase timers for a deploy `RankRuntime` step, without changing what the step computes.

`instrument(rt)` wraps the runtime's own methods on the instance (`_forward_group`, `_backward_group`,
`_sync`, the optimizer's `step`, and the `Comm` calls they make) so that every call adds its wall time
and its thread CPU time to a per-phase total. Phases:

    fwd, bwd       group forwards / backwards, without the message waits inside them
    fwd_comm, bwd_comm   `Comm.exchange` inside forward / backward (posting and waiting)
    sync           `_sync` minus its collectives (flatten and copy-back of buckets without a flat buffer)
    sync_comm      the collectives of `_sync` (`Comm.sum_over`, SFB all-gathers)
    update         `optimizer.step()`
    other          the rest of `step()` (zeroing grads, the loss scalar, clearing buffers)

`PhaseTimer.take()` returns and resets the totals of the calls since the last take (one step).
"""

from __future__ import annotations

import threading
import time

PHASES = ("fwd", "fwd_comm", "bwd", "bwd_comm", "sync", "sync_comm", "update", "other")


class PhaseTimer:
    """Wall and thread CPU ms per phase, accumulated over wrapped calls (nested calls counted once)."""

    def __init__(self):
        self.wall_ms = dict.fromkeys(PHASES, 0.0)
        self.cpu_ms = dict.fromkeys(PHASES, 0.0)
        self._stack: list[str] = []
        self._thread = threading.get_ident()  # the rank's main thread; calls from others (the runtime's sync
        #   thread, which issues bucket sums) are left out: they overlap the main thread's phases

    def wrap(self, fn, phase: str | None):
        """`fn` timed under `phase` (None: a message call, timed as "<enclosing phase>_comm"); a wrapped call
        made while another runs is subtracted from the enclosing one, so every ms is counted once."""

        def timed(*args, **kwargs):
            if threading.get_ident() != self._thread:
                return fn(*args, **kwargs)
            name = phase or (self._stack[-1] if self._stack else "sync") + "_comm"
            self._stack.append(name)
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                dw, dc = (time.perf_counter() - w0) * 1e3, (time.thread_time() - c0) * 1e3
                self._stack.pop()
                self.wall_ms[name] += dw
                self.cpu_ms[name] += dc
                if self._stack:
                    self.wall_ms[self._stack[-1]] -= dw
                    self.cpu_ms[self._stack[-1]] -= dc

        return timed

    def take(self, step_wall_ms: float, step_cpu_ms: float) -> dict:
        """{"wall": {phase: ms}, "cpu": {phase: ms}} of one step ("other" = step total - the rest); resets."""
        out = {"wall": dict(self.wall_ms), "cpu": dict(self.cpu_ms)}
        out["wall"]["other"] = step_wall_ms - sum(v for k, v in self.wall_ms.items() if k != "other")
        out["cpu"]["other"] = step_cpu_ms - sum(v for k, v in self.cpu_ms.items() if k != "other")
        self.wall_ms = dict.fromkeys(PHASES, 0.0)
        self.cpu_ms = dict.fromkeys(PHASES, 0.0)
        return out


def instrument(rt) -> PhaseTimer:
    """Wrap a `tag.deploy.runtime.RankRuntime`'s phases (on the instance only); the timer."""
    t = PhaseTimer()
    rt._forward_group = t.wrap(rt._forward_group, "fwd")
    rt._backward_group = t.wrap(rt._backward_group, "bwd")
    rt._sync = t.wrap(rt._sync, "sync")
    if rt.optimizer is not None:
        rt.optimizer.step = t.wrap(rt.optimizer.step, "update")
    for name in ("exchange", "sum_over", "all_gather_rows"):
        setattr(rt.comm, name, t.wrap(getattr(rt.comm, name), None))
    return t
