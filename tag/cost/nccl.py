"""NCCL's latency constants (Simple protocol) and the nccl-tests bus-bandwidth factors, each with its source.

Source of the latency tables: NVIDIA/nccl ``src/graph/tuning.cc`` at commit b6475625 (the tables with NVLS and
MNNVL entries), ``baseLat`` and ``hwLat`` for the Simple protocol (the one NCCL uses for large gradient buckets), in
microseconds (older releases differ: at commit 01afd20 the network step was Tree 50, Ring 9.6):

* ``baseLat`` (per collective call): Tree 0, Ring 8.4;
* ``hwLat`` (per step, by hardware of the step): NVLink: Tree 28, Ring 3.4; PCI: Tree 28, Ring 5.7;
  network: Tree 28, Ring 14.0.

tuning.cc's model of an all-reduce of S bytes on ``nRanks`` ranks over ``nNodes`` nodes is
``time = baseLat + steps + S / algBw`` with ring steps ``(2(nRanks-1) - 2 nNodes) intraLat + 2 nNodes interLat``
(``2(nRanks-1) intraLat`` on one node) and tree steps ``2 ((nRanks/nNodes - 1) intraLat + log2(nNodes) interLat)``;
the algorithm bandwidth is ``busBw x nRanks / (2(nRanks-1))`` for the ring and ``0.5 x 0.92 x busBw`` for the tree.
An older comment in the same file says why the Tree/Simple step is so much longer than the Ring/Simple one: it is
"the latency of a 256kB chunk", a tree level forwards a whole chunk before the next level starts.

How `tag.sim.collectives` uses them (its docstring has the whole model): the topology's route latency stays the
per-hop latency of every algorithm; on devices that all are GPUs (deploy runs NCCL there; gloo on CPUs) a tree
step adds `tree_step_extra_us` of its hop's hardware (the Tree/Simple minus Ring/Simple step), the tree's
bandwidth is `TREE_BUSBW_FACTOR` of its links', and the hierarchical algorithm adds one Ring/Simple base latency
per extra collective call it makes.

Bus bandwidth (nccl-tests ``doc/PERFORMANCE.md``): ``busBw = algBw x factor`` with factor ``2(n-1)/n`` for
all-reduce, ``(n-1)/n`` for reduce-scatter and all-gather, 1 for broadcast and reduce.
"""

from __future__ import annotations

NVLINK, PCI, NET = "nvlink", "pci", "net"  # tuning.cc's NCCL_HW_NVLINK, NCCL_HW_PCI, NCCL_HW_NET

# tuning.cc baseLat[algorithm][Simple], us (NVIDIA/nccl b6475625)
BASE_LAT_US = {"tree": 0.0, "ring": 8.4}

# tuning.cc hwLat[hardware][algorithm][Simple], us (NVIDIA/nccl b6475625)
HW_LAT_US = {
    NVLINK: {"tree": 28.0, "ring": 3.4},
    PCI: {"tree": 28.0, "ring": 5.7},
    NET: {"tree": 28.0, "ring": 14.0},
}

# tuning.cc: the tree's bus bandwidth is 0.92 of the graph's (``busBw*.92``), before the 0.5 algBw ratio.
TREE_BUSBW_FACTOR = 0.92

# A machine's fabric counts as NVLink when it is faster than PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 = 252
# Gbit/s per direction (PCI-SIG PCIe 4.0 base specification), 256 in the repo's topologies (modern8's L4s).
PCIE4_X16_GBPS = 256.0


def tree_step_extra_us(hardware: str) -> float:
    """What a tree step adds to its route latency under NCCL, us: hwLat Tree/Simple - Ring/Simple of `hardware`
    (NVLINK 24.6, PCI 22.3, NET 14.0).

    >>> round(tree_step_extra_us(NET), 6)
    14.0
    """
    lat = HW_LAT_US[hardware]
    return lat["tree"] - lat["ring"]


def extra_call_us() -> float:
    """The base latency of one more NCCL collective call (Ring/Simple baseLat), us."""
    return BASE_LAT_US["ring"]


def intra_hardware(intra_bandwidth_gbps: float) -> str:
    """NCCL's hardware class of a step inside a machine whose fabric runs at `intra_bandwidth_gbps`."""
    return NVLINK if intra_bandwidth_gbps > PCIE4_X16_GBPS else PCI


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of `collective` on n ranks (doc/PERFORMANCE.md).

    >>> busbw_factor("allreduce", 4), busbw_factor("allgather", 4), busbw_factor("broadcast", 4)
    (1.5, 0.75, 1.0)
    """
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")
