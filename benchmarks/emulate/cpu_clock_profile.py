"""`tag profile ops` timed in thread CPU time instead of wall time (for one-thread CPU ranks on a shared machine).

    python benchmarks/emulate/cpu_clock_profile.py ARGS...      # the arguments of `tag profile ops`

On a machine shared with other tenants a wall-clock median of a 100-ms op includes the time the scheduler
gave the core to someone else, at the load of the moment the profile ran. With one intra-op thread the
calling thread's CPU time is the op's own work; the fidelity benchmark then models the stretch from CPU
time to wall time explicitly (`handoff_probe.py`, measured at the load the steps are measured at). The
profiler's clock (`time.perf_counter_ns` in `tag.profile.timing`) is pointed at `time.thread_time_ns`.
"""

import sys
import time

if __name__ == "__main__":
    time.perf_counter_ns = time.thread_time_ns
    from tag.cli import main

    sys.exit(main(["profile", "ops", *sys.argv[1:]]))
