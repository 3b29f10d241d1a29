"""The emulation harness: a shaped link measures at its configured rate; namespaces and cgroups are removed."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from emulate import cpuquota, netns, probe  # noqa: E402

NET_OK, NET_WHY = netns.available()
CPU_OK, CPU_WHY = cpuquota.available()
# TCP over Ethernet: 1448 payload bytes per 1514-byte frame (20 IP + 32 TCP-with-timestamps + 14 Ethernet
# header bytes); the token bucket counts whole frames, the probe counts payload.
GOODPUT = 1448 / 1514


def _namespaces() -> set:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.skipif(not NET_OK, reason=f"network namespaces/tc unavailable: {NET_WHY}")
def test_shaped_link_measures_its_rate_and_is_removed():
    before = _namespaces()
    with netns.Star([40.0, 120.0]) as star:
        made = set(star.namespaces)
        assert made and not (made & before)
        # m0 -> m1 is bounded by m0's 40 Mbit/s egress; m1 -> m0 by the hub's 40 Mbit/s egress toward m0
        for src, dst in ((0, 1), (1, 0)):
            got = probe.measure_mbit(star, src, dst, nbytes=3_000_000, port=5301 + src)
            assert abs(got - 40.0 * GOODPUT) <= 0.10 * 40.0 * GOODPUT, (src, dst, got)
    assert not (_namespaces() & made)


@pytest.mark.skipif(not CPU_OK, reason=f"cgroup cpu quota unavailable: {CPU_WHY}")
def test_cpu_quota_stretches_wall_time_and_is_removed():
    q = cpuquota.CpuQuota([0.25])
    path = q.paths[0]
    code = ("import time\nt = time.perf_counter(); c = time.process_time()\n"
            "while time.process_time() - c < 0.2: pass\nprint(time.perf_counter() - t)")
    try:
        wall = float(subprocess.run(q.wrap(0, [sys.executable, "-c", code]), capture_output=True, text=True,
                                    check=True).stdout)
    finally:
        q.close()
    # 0.2 s of CPU at a quarter of a core needs at least 0.8 s of wall time minus one period of slack
    assert wall >= 0.2 / 0.25 - cpuquota.PERIOD_US / 1e6
    assert not os.path.exists(path)
