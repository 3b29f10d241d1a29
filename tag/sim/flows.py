"""A flow to start on the cluster's links (`FlowSpec`) and the few ways a collective's flows are built from one:
a point-to-point transfer over a route, a flow slowed to a measured per-hop rate, a flow with added latency.
`tag.sim.collectives` composes these into each sync method's phases; `tag.sim.gloo_tree` and `tag.sim.cpu_calls`
adjust them for CPU ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.cost import comm
from tag.topology.cluster import Cluster


@dataclass(frozen=True)
class FlowSpec:
    """A flow to start: directed links with weights (bytes per byte of progress), its volume in bytes, the
    latency added after it drains (ms), and its first and last device (for labels)."""

    links: tuple[int, ...]
    weights: tuple[float, ...]
    volume_bytes: float
    latency_ms: float
    src: int  # first device (for labels)
    dst: int


def p2p_spec(cluster: Cluster, src: int, dst: int, nbytes: float) -> FlowSpec:
    """A point-to-point transfer of `nbytes` from device src to dst over its route."""
    route = cluster.routes[src][dst]
    return FlowSpec(tuple(route), (1.0,) * len(route), float(nbytes), float(cluster.latency_us[src][dst]) / 1e3, src, dst)


def _capped(cluster: Cluster, spec: FlowSpec, ring_gbps: float | None, hop_repeats: int = 1) -> FlowSpec:
    """`spec` slowed to the measured per-hop rate `ring_gbps` when its uncontended rate is above it; `hop_repeats`:
    the most times one hop appears in the coflow (module docstring)."""
    if ring_gbps is None or ring_gbps <= 0 or not spec.links:
        return spec
    free_rate = min(cluster.links[l].bytes_per_ms / w for l, w in zip(spec.links, spec.weights))
    cap = comm.bytes_per_ms(ring_gbps) / hop_repeats
    if free_rate <= cap:
        return spec
    return FlowSpec(spec.links, spec.weights, spec.volume_bytes * free_rate / cap, spec.latency_ms, spec.src, spec.dst)


def _with_latency(spec: FlowSpec, extra_ms: float) -> FlowSpec:
    return FlowSpec(spec.links, spec.weights, spec.volume_bytes, spec.latency_ms + extra_ms, spec.src, spec.dst)
