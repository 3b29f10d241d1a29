"""Ring, tree and hierarchical all-reduce times alone on uniform clusters, against the formulas worked out by hand.

Cluster: 8 machines x 8 GPUs (`make_cluster`): each device port 1000 Gbit/s = 1.25e8 B/ms (NVLink class: above
PCIe 4.0 x16) with 1 us, each NIC 100 Gbit/s = 1.25e7 B/ms with 4 us: 2 us between two devices of a machine,
10 us across machines. S = 1e8 B, so S over a port takes 0.8 ms and S over a NIC 8 ms. On GPUs NCCL's latencies
apply (tuning.cc, Simple): a tree step adds 28 - 3.4 = 24.6 us inside an NVLink machine and 28 - 14 = 14 us across
machines, the tree moves at 0.92 of its links, hierarchical adds 8.4 us to its reduce-scatter and its all-gather.
"""

from __future__ import annotations

import pytest

from simkit_builders import make_cluster
from tag.sim.algorithms import algorithm_ms
from tag.sim.collectives import sync_phases
from tag.topology.cluster import DeviceType

S = 1e8
PORT_MS = 0.8  # S / 1.25e8 B/ms
NIC_MS = 8.0  # S / 1.25e7 B/ms
A_IN, A_NET = 0.002, 0.010  # route latencies, ms
TREE_IN, TREE_NET = 0.0246, 0.014  # NCCL's extra per tree step, ms
CALL = 0.0084  # NCCL Ring/Simple base latency, ms
CPU = DeviceType("TestCPU", peak_tflops=0.1, memory_gb=16.0, memory_bandwidth_gbps=100.0, kind="cpu")


@pytest.fixture(scope="module")
def gpus():
    return make_cluster([8] * 8, intra_gbps=1000.0, nic_gbps=100.0)


@pytest.fixture(scope="module")
def cpus():
    return make_cluster([8] * 8, intra_gbps=1000.0, nic_gbps=100.0, dtype=CPU)


def _t(method, cluster, devices):
    return algorithm_ms(method, cluster, tuple(devices), S)


def test_two_devices_on_two_machines(gpus):
    devs = (0, 8)
    # ring of 2: 2 x 1/2 x S through each NIC, 2 steps of 10 us
    assert _t("ring", gpus, devs) == pytest.approx(NIC_MS + 2 * A_NET, rel=1e-12)
    # trees m0 <- m1 and m1 <- m0: each NIC direction carries 2 hops of S/2 / 0.92; one step up, one down
    assert _t("tree", gpus, devs) == pytest.approx(NIC_MS / 0.92 + 2 * (A_NET + TREE_NET), rel=1e-12)
    # one device per machine: no reduce-scatter, one ring of S across: the ring, no extra call
    assert _t("hierarchical", gpus, devs) == pytest.approx(NIC_MS + 2 * A_NET, rel=1e-12)


def test_eight_devices_in_one_machine(gpus):
    devs = range(8)
    # 2 x 7/8 x S on every port, 14 steps of 2 us
    assert _t("ring", gpus, devs) == pytest.approx(1.75 * PORT_MS + 14 * A_IN, rel=1e-12)
    # one machine: both trees are the chain 0-1-...-7; an inner device's port out carries up + down of both
    # trees = 4 hops of S/2 / 0.92; 7 steps up and 7 down of 2 + 24.6 us
    assert _t("tree", gpus, devs) == pytest.approx(4 * 0.5 * PORT_MS / 0.92 + 14 * (A_IN + TREE_IN), rel=1e-12)
    # reduce-scatter and all-gather of 7/8 S, 7 steps each, one extra NCCL call each; nothing across machines
    assert _t("hierarchical", gpus, devs) == pytest.approx(2 * (0.875 * PORT_MS + 7 * A_IN + CALL), rel=1e-12)


def test_eight_devices_on_eight_machines(gpus):
    devs = range(0, 64, 8)
    assert _t("ring", gpus, devs) == pytest.approx(1.75 * NIC_MS + 14 * A_NET, rel=1e-12)
    # 8 machines: an inner node of one tree sends up 1 + down 2 there and up 1 in the other tree: 4 hops of
    # S/2 / 0.92 through its NIC; both trees are 3 deep (log2 8)
    assert _t("tree", gpus, devs) == pytest.approx(2 * NIC_MS / 0.92 + 2 * 3 * (A_NET + TREE_NET), rel=1e-12)


def test_sixty_four_devices_on_eight_machines(gpus):
    devs = range(64)
    # one ring through every NIC once: 2 x 63/64 x S, 126 steps of the largest hop latency (10 us)
    assert _t("ring", gpus, devs) == pytest.approx(2 * 63 / 64 * NIC_MS + 126 * A_NET, rel=1e-12)
    # NIC: 4 hops of S/2 / 0.92 (the heads' ports carry 6 at 10x the rate); up: 7 chain steps + 3 tree levels
    tree = 2 * NIC_MS / 0.92 + 2 * (7 * (A_IN + TREE_IN) + 3 * (A_NET + TREE_NET))
    assert _t("tree", gpus, devs) == pytest.approx(tree, rel=1e-12)
    # reduce-scatter 7/8 S in each machine; 8 rings of S/8 across the 8 machines, 2 x 7/8 x S/8 each, all 8
    # through each NIC (14 ms); all-gather as the reduce-scatter
    intra = 0.875 * PORT_MS + 7 * A_IN + CALL
    assert _t("hierarchical", gpus, devs) == pytest.approx(2 * intra + 8 * 1.75 / 8 * NIC_MS + 14 * A_NET,
                                                         rel=1e-12)


def test_on_cpus_no_nccl_latencies(cpus):
    devs = range(64)
    # gloo runs deploy's p2p tree (tests/sim/test_gloo_tree.py): d8 sends S up to d0 through the NICs, then back
    assert _t("tree", cpus, (0, 8)) == pytest.approx(2 * (NIC_MS + A_NET), rel=1e-12)
    hier = 2 * (0.875 * PORT_MS + 7 * A_IN) + 1.75 * NIC_MS + 14 * A_NET
    assert _t("hierarchical", cpus, devs) == pytest.approx(hier, rel=1e-12)
    assert _t("ring", cpus, devs) == _t("ring", make_cluster([8] * 8, 1000.0, 100.0), devs)


def test_hierarchical_on_uneven_machines():
    # shards as deploy cuts them: k = the fewest devices a machine holds; the j-th device of each machine (j < k)
    # owns shard j. 3 devices + 1 device: k = 1, d0 owns all of m0's S: its ring reduce-scatter's hop out of d1
    # carries all of S (d1 owns nothing), 2 steps; one ring (d0, d3) of S across: 2 x 1/2 x S through each NIC
    cl = make_cluster([3, 1], intra_gbps=1000.0, nic_gbps=100.0)
    intra = PORT_MS + 2 * A_IN + CALL
    assert algorithm_ms("hierarchical", cl, (0, 1, 2, 3), S) == pytest.approx(2 * intra + NIC_MS + 2 * A_NET,
                                                                               rel=1e-12)
    # 2 + 3: k = 2; m0 reduce-scatters S/2 per hop in 1 step, m1 all of S in 2 steps (its third device owns
    # nothing): m1 bounds the phase; rings (d0, d2) and (d1, d3) of S/2 each, 2 x 1/2 x S/2, both through each NIC
    cl = make_cluster([2, 3], intra_gbps=1000.0, nic_gbps=100.0)
    intra = max(0.5 * PORT_MS + A_IN, PORT_MS + 2 * A_IN) + CALL
    assert algorithm_ms("hierarchical", cl, (0, 1, 2, 3, 4), S) == pytest.approx(2 * intra + NIC_MS + 2 * A_NET,
                                                                                  rel=1e-12)
    # the across-machine rings are the ones deploy opens process groups for (tests/deploy: (0, 2) and (1, 3))
    (cross,) = sync_phases("hierarchical", cl, (0, 1, 2, 3, 4), S)[1]
    hops = {(a, b) for a, b in ((0, 2), (2, 0), (1, 3), (3, 1))}
    want = {}
    for a, b in hops:
        for l in cl.routes[a][b]:
            want[l] = want.get(l, 0) + 1
    assert dict(zip(cross.links, cross.weights)) == want


def test_tree_is_capped_at_the_measured_collective_rate():
    cl = make_cluster([2], intra_gbps=1000.0, dtype=CPU)
    # gloo's tree (deploy's p2p tree_sum): S from d1 to d0, then S back, each at the 1 Gbit/s = 1.25e5 B/ms cap
    assert algorithm_ms("tree", cl, (0, 1), S, ring_gbps=1.0) == pytest.approx(2 * (S / 1.25e5 + A_IN), rel=1e-12)
    # NCCL's double tree on 2 GPUs: each hop appears twice (both trees use the chain), each moving S/2 / 0.92 at
    # the measured per-hop rate: 2 x S/2 / 0.92 / 1.25e5; 1 step up, 1 down of 2 + 24.6 us
    gl = make_cluster([2], intra_gbps=1000.0)
    assert algorithm_ms("tree", gl, (0, 1), S, ring_gbps=1.0) == pytest.approx(S / 0.92 / 1.25e5 + 2 * (A_IN + TREE_IN),
                                                                               rel=1e-12)


def test_tree_steps_inside_a_pcie_machine():
    # 128 Gbit/s = 1.6e7 B/ms fabric (PCIe class, not above PCIe 4.0 x16): a tree step adds 28 - 5.7 = 22.3 us
    cl = make_cluster([4], intra_gbps=128.0)
    chain = 4 * 0.5 * (S / 1.6e7) / 0.92  # inner devices' ports carry 4 hops of S/2 / 0.92
    assert algorithm_ms("tree", cl, (0, 1, 2, 3), S) == pytest.approx(chain + 6 * (A_IN + 0.0223), rel=1e-12)


def test_a_measured_step_latency_floors_every_collective_step(cpus):
    """`step_us` (the collective library's per-step latency, fitted by `tag profile links`): a step takes
    max(route latency, step_us). 8 CPUs in one machine, step 240 us above the 2 us route: the ring's 14 steps
    take 240 us each (the CPU tree's point-to-point messages keep the route's); hierarchical over 2 machines x 4: its reduce-scatter
    and all-gather 3 steps each of 240 us, its cross ring of 4 rings 2 steps of max(10, 240) us. A step latency
    below the route's (1 us) changes nothing; point-to-point ps keeps the route's."""
    step = 0.240
    one = tuple(range(8))
    ring = 2 * 7 / 8 * PORT_MS + 14 * step
    assert algorithm_ms("ring", cpus, one, S, step_us=240.0) == pytest.approx(ring, rel=1e-12)
    # the CPU tree is deploy's point-to-point messages (route latency, no step floor): levels 7 -> 3; 3, 4 -> 1 and
    # 5, 6 -> 2 (two messages into each parent's port); 1, 2 -> 0; then back down
    tree = 2 * (PORT_MS + 2 * PORT_MS + 2 * PORT_MS) + 6 * A_IN
    assert algorithm_ms("tree", cpus, one, S, step_us=240.0) == pytest.approx(tree, rel=1e-12)
    two = (0, 1, 2, 3, 8, 9, 10, 11)
    hier = 2 * (0.75 * PORT_MS + 3 * step) + 2 * (1 / 2) * (S / 4) * 4 / 1.25e7 + 2 * step
    assert algorithm_ms("hierarchical", cpus, two, S, step_us=240.0) == pytest.approx(hier, rel=1e-12)
    assert algorithm_ms("ring", cpus, one, S, step_us=1.0) == algorithm_ms("ring", cpus, one, S)
    assert algorithm_ms("ps", cpus, (0, 1), S, 0, step_us=240.0) == algorithm_ms("ps", cpus, (0, 1), S, 0)
