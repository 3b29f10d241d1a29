"""The tree all-reduce as deploy runs it on CPU ranks (gloo has no tree: `tag.deploy.p2p_collectives.tree_sum`).

One binary tree over the sync's devices sorted (index i has children 2i+1 and 2i+2): the whole S goes up one level
at a time (a phase per level, deepest first: every child -> parent message of S at once), then the root's total
down one level at a time; each message a point-to-point flow of S at its route's rate and latency, capped at the
measured collective rate (`tag.sim.flows._capped`: gloo's per-hop copy and reduce work bounds these messages
as it bounds a ring hop). Alone on 2 ranks: ``2 (S / rate + alpha)``, twice a ring's bytes: measured on 2 local
gloo ranks, `tree_sum` of 64 MiB 82 ms against gloo's ring all-reduce 43.5 ms, of 0.25 MiB 0.37 against 1.33 ms
(the ring pays gloo's per-step latency, the tree only the route's). `tag.sim.collectives.tree_phases` calls it for
a sync whose devices are not all GPUs.
"""

from __future__ import annotations

from tag.sim.flows import FlowSpec, _capped, p2p_spec
from tag.topology.cluster import Cluster


def gloo_tree_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                     ring_gbps: float | None = None) -> list[list[FlowSpec]]:
    """The tree as deploy runs it on CPU ranks (`tag.deploy.p2p_collectives.tree_sum`; module docstring): one
    binary tree over `devices` sorted (index i has children 2i+1, 2i+2), S up one level per phase (deepest first),
    then down one level per phase; each message a point-to-point flow of `nbytes` capped at `ring_gbps`."""
    order = sorted(devices)
    depth = [0] * len(order)
    for i in range(1, len(order)):
        depth[i] = depth[(i - 1) // 2] + 1
    levels = range(max(depth), 0, -1)
    up = [[_capped(cluster, p2p_spec(cluster, order[i], order[(i - 1) // 2], nbytes), ring_gbps)
           for i in range(1, len(order)) if depth[i] == d] for d in levels]
    down = [[_capped(cluster, p2p_spec(cluster, order[(i - 1) // 2], order[i], nbytes), ring_gbps)
             for i in range(1, len(order)) if depth[i] == d] for d in reversed(levels)]
    return up + down
