"""Communication formulas (alpha-beta), the one place for each; the simulator and tests use these.

Units: bytes, bandwidth in 10^9 bits/s (``_gbps``), latency in microseconds (``_us``), results in ms.
A transfer of S bytes over a route of bandwidth B and latency alpha takes ``alpha + S / B``.
Collective algorithms (uncontended, n participants, every hop of bandwidth B and latency alpha):

* ring all-reduce: reduce-scatter then all-gather, 2(n-1) steps of S/n bytes per hop:
  ``2(n-1)/n x S / B + 2(n-1) x alpha``
* all-gather of S bytes in total (each holds S/n): ``(n-1)/n x S / B + (n-1) x alpha``
* chain (pipelined) reduce or broadcast, as NCCL runs them: ``S / B + (n-1) x alpha``
* parameter server with w workers sending to a server whose link is the bottleneck (incast):
  push ``w x S / B + alpha`` then pull ``w x S / B + alpha``
* ring reduce-scatter where device i ends with the share f_i of S: the hop out of device i carries every share
  but its own, (1 - f_i) x S; lockstep, the busiest hop: ``(1 - min_i f_i) x S / B + (n-1) x alpha``
  (``(n-1)/n x S / B`` for equal shares)
* double binary tree all-reduce (NCCL): each half of S goes up one tree (reduce) and down again (broadcast),
  pipelined; a directed link that h tree hops cross carries h x S/2: ``h_max x S/2 / B + 2 x (path latency)``
  (h_max = 4 on the NIC of a machine that is an inner node of one tree: 2S per direction)
* hierarchical all-reduce on k machines of m replicas (NCCL/Horovod): ring reduce-scatter inside each machine,
  m rings (one per local rank) all-reduce the 1/m shards across the k machines (sharing each NIC), ring
  all-gather inside: ``2 x ((m-1)/m x S / B_intra + (m-1) alpha_intra) + 2(k-1)/k x S / B_nic + 2(k-1) alpha_inter``
* leader all-reduce on k machines of m replicas (version 1's "hierarchical"): chain reduce inside each machine,
  ring all-reduce across the k machine leaders, chain broadcast inside each machine.
"""

from __future__ import annotations

from tag.cost.nccl import busbw_factor


def bytes_per_ms(bandwidth_gbps: float) -> float:
    """Bytes per millisecond of a bandwidth in 10^9 bits per second."""
    return bandwidth_gbps * 1e9 / 8 / 1e3


def p2p_ms(nbytes: float, bandwidth_gbps: float, latency_us: float) -> float:
    """Time of one point-to-point transfer of `nbytes`, ms: alpha + S / B.

    >>> p2p_ms(1e6, 8.0, 10.0)  # 1 MB at 1 GB/s + 10 us
    1.01
    """
    return latency_us / 1e3 + nbytes / bytes_per_ms(bandwidth_gbps)


def ring_allreduce_volume_bytes(nbytes: float, n: int) -> float:
    """Bytes each ring hop carries in a ring all-reduce of `nbytes`: 2(n-1)/n x S."""
    return 2.0 * (n - 1) / n * nbytes if n > 1 else 0.0


def ring_allreduce_steps(n: int) -> int:
    """Latency-bound steps of a ring all-reduce: 2(n-1)."""
    return 2 * (n - 1) if n > 1 else 0


def ring_allreduce_ms(nbytes: float, n: int, bandwidth_gbps: float, latency_us: float) -> float:
    """Ring all-reduce of `nbytes` over n devices, ms: 2(n-1)/n x S / B + 2(n-1) x alpha.

    >>> round(ring_allreduce_ms(4e6, 4, 8.0, 5.0), 6)  # 6 MB per hop at 1 GB/s + 6 x 5 us
    6.03
    """
    if n <= 1:
        return 0.0
    return ring_allreduce_volume_bytes(nbytes, n) / bytes_per_ms(bandwidth_gbps) + ring_allreduce_steps(n) * latency_us / 1e3


def allgather_volume_bytes(total_bytes: float, n: int) -> float:
    """Bytes each ring hop carries in an all-gather of `total_bytes` (each holds 1/n): (n-1)/n x S."""
    return (n - 1) / n * total_bytes if n > 1 else 0.0


def allgather_ms(total_bytes: float, n: int, bandwidth_gbps: float, latency_us: float) -> float:
    """Ring all-gather where the gathered result has `total_bytes`, ms: (n-1)/n x S / B + (n-1) x alpha."""
    if n <= 1:
        return 0.0
    return allgather_volume_bytes(total_bytes, n) / bytes_per_ms(bandwidth_gbps) + (n - 1) * latency_us / 1e3


def chain_ms(nbytes: float, n: int, bandwidth_gbps: float, latency_us: float) -> float:
    """Pipelined chain reduce or broadcast of `nbytes` over n devices, ms: S / B + (n-1) x alpha."""
    if n <= 1:
        return 0.0
    return nbytes / bytes_per_ms(bandwidth_gbps) + (n - 1) * latency_us / 1e3


def ps_ms(nbytes: float, n_workers: int, bandwidth_gbps: float, latency_us: float) -> float:
    """Parameter-server sync of `nbytes` with `n_workers` devices other than the server, ms.

    Push (incast: the workers share the server's link) then pull (the server's link is shared again):
    ``2 x (w x S / B + alpha)``. `bandwidth_gbps` is the server link, the bottleneck.

    >>> ps_ms(1e6, 1, 8.0, 10.0)
    2.02
    """
    if n_workers <= 0:
        return 0.0
    one_way = n_workers * nbytes / bytes_per_ms(bandwidth_gbps) + latency_us / 1e3
    return 2.0 * one_way


def reduce_scatter_volume_bytes(nbytes: float, shares: list[float]) -> float:
    """Bytes the busiest hop carries in a ring reduce-scatter of `nbytes` where device i ends with the fraction
    shares[i] of the result (summing to 1): (1 - min_i shares[i]) x S; (n-1)/n x S for equal shares.

    >>> reduce_scatter_volume_bytes(8.0, [0.25] * 4), reduce_scatter_volume_bytes(8.0, [0.5, 0.25, 0.25])
    (6.0, 6.0)
    """
    if len(shares) <= 1:
        return 0.0
    return (1.0 - min(shares)) * nbytes


def tree_allreduce_ms(nbytes: float, hops_on_link: int, bandwidth_gbps: float, path_latency_us: float) -> float:
    """Double binary tree all-reduce, ms: ``h x S/2 / B + 2 x path latency``, where the busiest directed link (of
    bandwidth B) carries h tree hops of S/2 each, and `path_latency_us` is the deepest device's latency to its
    tree's root (up for the reduce, the same again down for the broadcast).

    >>> round(tree_allreduce_ms(2e6, 4, 8.0, 30.0), 6)  # 4 x 1 MB at 1 GB/s + 2 x 30 us
    4.06
    """
    return hops_on_link * nbytes / 2.0 / bytes_per_ms(bandwidth_gbps) + 2.0 * path_latency_us / 1e3


def hierarchical_allreduce_ms(nbytes: float, n_machines: int, per_machine: int,
                              intra_bandwidth_gbps: float, intra_latency_us: float,
                              inter_bandwidth_gbps: float, inter_latency_us: float) -> float:
    """Hierarchical all-reduce (NCCL/Horovod form) on k = `n_machines` machines of m = `per_machine` replicas,
    ms: ring reduce-scatter in each machine + m rings of S/m across the machines (all m through each machine's
    NIC) + ring all-gather in each machine:
    ``2 x ((m-1)/m x S / B_intra + (m-1) alpha_intra) + 2(k-1)/k x S / B_inter + 2(k-1) alpha_inter``.

    >>> round(hierarchical_allreduce_ms(8e6, 2, 4, 80.0, 2.0, 8.0, 10.0), 6)  # 2 x (0.6 + 0.006) + 8 + 0.02
    9.232
    """
    intra = allgather_ms(nbytes, per_machine, intra_bandwidth_gbps, intra_latency_us)
    if n_machines <= 1:
        return 2.0 * intra
    inter = 2.0 * (n_machines - 1) / n_machines * nbytes / bytes_per_ms(inter_bandwidth_gbps)
    return 2.0 * intra + inter + 2 * (n_machines - 1) * inter_latency_us / 1e3


def leader_allreduce_ms(nbytes: float, n_machines: int, per_machine: int,
                        intra_bandwidth_gbps: float, intra_latency_us: float,
                        inter_bandwidth_gbps: float, inter_latency_us: float) -> float:
    """Leader all-reduce (version 1's "hierarchical"), ms: chain reduce in each machine + ring all-reduce across
    the machine leaders + chain broadcast in each machine (machines run their intra phases in parallel).
    """
    intra = chain_ms(nbytes, per_machine, intra_bandwidth_gbps, intra_latency_us)
    return 2.0 * intra + ring_allreduce_ms(nbytes, n_machines, inter_bandwidth_gbps, inter_latency_us)


def busbw_gbps(nbytes: float, n: int, time_ms: float) -> float:
    """nccl-tests bus bandwidth of an all-reduce: S / t x 2(n-1)/n, in 10^9 bits/s (`tag.cost.nccl.busbw_factor`)."""
    return nbytes / time_ms * 1e3 * 8 / 1e9 * busbw_factor("allreduce", n)
