"""The tree all-reduce on CPU ranks costs what deploy's point-to-point tree (`tree_sum`) does, worked out by hand.

Cluster (`make_cluster`): one machine of CPU devices, each port 1000 Gbit/s = 1.25e8 B/ms with 1 us, so 2 us between
two devices; S = 1e8 B takes 0.8 ms through a port. The tree is binary over the devices in order (i has children
2i+1, 2i+2): S goes up one level at a time, then down one level at a time.
"""

from __future__ import annotations

import pytest

from simkit_builders import make_cluster
from tag.sim.algorithms import algorithm_ms, choose_algorithm
from tag.sim.collectives import sync_phases
from tag.topology.cluster import DeviceType

S = 1e8
PORT_MS = 0.8
A_IN = 0.002
CPU = DeviceType("TestCPU", peak_tflops=0.1, memory_gb=16.0, memory_bandwidth_gbps=100.0, kind="cpu")


def test_levels_of_five_cpus():
    cl = make_cluster([5], intra_gbps=1000.0, dtype=CPU)
    phases = sync_phases("tree", cl, (0, 1, 2, 3, 4), S)
    pairs = [sorted((f.src, f.dst) for f in ph) for ph in phases]
    # depth 2: 3 and 4 send to 1; depth 1: 1 and 2 send to 0; then back down
    assert pairs == [[(3, 1), (4, 1)], [(1, 0), (2, 0)], [(0, 1), (0, 2)], [(1, 3), (1, 4)]]
    # every phase: two messages of S share one port direction (into the parent, or out of it): 2 x 0.8 ms + 2 us
    assert algorithm_ms("tree", cl, (0, 1, 2, 3, 4), S) == pytest.approx(4 * (2 * PORT_MS + A_IN), rel=1e-12)


def test_two_cpus_tree_is_twice_the_ring_at_the_measured_rate():
    cl = make_cluster([2], intra_gbps=1000.0, dtype=CPU)
    # measured rate 10 Gbit/s = 1.25e6 B/ms: the ring moves S/2 each way twice (S per hop, 80 ms, 2 steps of
    # 0.19 ms); the tree sends S up and S down (160 ms, two messages of 2 us)
    ring = algorithm_ms("ring", cl, (0, 1), S, ring_gbps=10.0, step_us=190.0)
    tree = algorithm_ms("tree", cl, (0, 1), S, ring_gbps=10.0, step_us=190.0)
    assert ring == pytest.approx(80.0 + 2 * 0.19, rel=1e-12)
    assert tree == pytest.approx(160.0 + 2 * A_IN, rel=1e-12)
    assert choose_algorithm(cl, (0, 1), S, ring_gbps=10.0, step_us=190.0) == "ring"
    # 1e4 B: ring 8e-3 ms + 0.38 ms of steps; tree 1.6e-2 ms + 4 us: the tree (gloo's per-step latency avoided)
    assert choose_algorithm(cl, (0, 1), 1e4, ring_gbps=10.0, step_us=190.0) == "tree"
