"""The per-phase step timers (`benchmarks/emulate/phases.py`): nested calls are counted once, messages are
charged to the phase they happen in, and `other` is the rest of the step. A fake clock makes it exact."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from emulate import phases  # noqa: E402


class _Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def thread_time(self):
        return self.now / 2  # CPU runs at half the wall clock here


def test_nested_message_calls_are_split_out(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(phases, "time", clock)
    t = phases.PhaseTimer()

    def exchange():
        clock.now += 0.003  # 3 ms in a message call

    ex = t.wrap(exchange, None)

    def forward():
        clock.now += 0.002
        ex()
        clock.now += 0.001

    def sync():
        clock.now += 0.004
        ex()

    fwd, syn = t.wrap(forward, "fwd"), t.wrap(sync, "sync")
    fwd()
    syn()
    got = t.take(step_wall_ms=20.0, step_cpu_ms=10.0)
    assert abs(got["wall"]["fwd"] - 3.0) < 1e-9 and abs(got["wall"]["fwd_comm"] - 3.0) < 1e-9
    assert abs(got["wall"]["sync"] - 4.0) < 1e-9 and abs(got["wall"]["sync_comm"] - 3.0) < 1e-9
    assert abs(got["wall"]["other"] - (20.0 - 13.0)) < 1e-9
    assert abs(got["cpu"]["fwd"] - 1.5) < 1e-9 and abs(got["cpu"]["other"] - (10.0 - 6.5)) < 1e-9
    again = t.take(step_wall_ms=1.0, step_cpu_ms=1.0)  # reset after take
    assert again["wall"]["fwd"] == 0.0 and again["wall"]["other"] == 1.0
