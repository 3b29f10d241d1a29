"""Gradient sync as phases of flows routed over the cluster (what each sync method puts on the wire).

A collective is a list of phases; a phase is a list of `FlowSpec`s that run concurrently; a phase starts
when the previous one has delivered. Ring and tree collectives are one weighted flow (a "coflow") whose hops
progress in lockstep, as a pipelined collective's steps do: it crosses, for every hop a -> b, the links of
``routes[a][b]``, each link weighted by the number of hops that use it, and it carries the per-hop volume
of the algorithm (`tag.cost.comm`). A coflow alone takes ``volume x max_l (w_l / cap_l) + latency``; two flows
that share a link split it max-min fairly (`tag.sim.network`). `tag.sim.algorithms.algorithm_ms` gives each
method's time alone; below, S is the sync's bytes, alpha(a, b) the route latency ``latency_us[a][b]``, and the
machines of a sync are those of its devices, in topology order, each with its devices in topology order.

* ``ring`` (alias ``allreduce``, version 1's name): one ring coflow over the devices in topology order, volume
  2(n-1)/n x S per hop, latency 2(n-1) x (largest hop latency of the ring). Alone:
  ``2(n-1)/n x S x max_l (w_l / cap_l) + 2(n-1) x max alpha``.
* ``tree``: NCCL's double binary tree. Inside each machine its devices form a chain (the first is the head);
  the heads form two complementary binary trees over the machines (NCCL ``trees.cc``: tree 1 is ``ncclGetBtree``
  rooted at machine 0, tree 2 its mirror for an even machine count, its shift by one for an odd count); each
  half of S is reduced up one tree (chains included) and broadcast down it, pipelined: one coflow of volume S/2
  whose hops are every tree edge in both directions, for both trees (each chain hop therefore twice). Alone:
  ``S/2 / e x max_l (w_l / cap_l) + max over the two trees of (deepest up path + deepest down path)``, where a
  path's latency sums its hops' step latencies (route latency, plus NCCL's tree step on GPUs) and e = 0.92 on GPUs
  (1 otherwise). On one machine both trees are the chain. Uniform, k machines of m GPUs, k a power of two >= 4:
  a NIC carries 4 hops, ``2S / (0.92 B_nic) + 2((m-1)(alpha_intra + t_intra) + log2(k) (alpha_inter + 14 us))``,
  t_intra = 24.6 us (NVLink) or 22.3 us (PCIe).
  **On CPU ranks** (gloo has no tree) the tree is what deploy's `tag.deploy.p2p_collectives.tree_sum` does: one
  binary tree over the devices, S up and down one level per phase (`tag.sim.gloo_tree`).
* ``hierarchical`` (NCCL/Horovod form, sharded as deploy shards it, `tag.deploy.comm`): with k the fewest
  replicas any of the sync's machines holds, S is cut into k shards of S/k, and in every machine its j-th device
  (j < k) owns shard j; devices past the k-th own none. (1) In each machine, a ring reduce-scatter coflow:
  volume ``(1 - f_min) x S`` per hop, f_min the smallest share a device of the machine owns ((m-1)/m x S when
  the machine holds k devices; S when it holds more: a ring reduce-scatter's hop out of a device carries every
  share but its own), m_i - 1 steps; (2) for every shard j, a ring all-reduce of S/k over the j-th devices of
  all machines, the k rings as one coflow (each ring volume 2(K-1)/K x S/k on K machines, 2(K-1) x the largest
  hop latency of all rings: the rings share each NIC); (3) in each machine, a ring all-gather coflow
  mirroring (1). Machines run (1) and (3) in parallel. Alone on K machines of m devices each (k = m; phase (2)'s
  coflow crosses each NIC m times): ``2 x ((m-1)/m x S / B_intra + (m-1) alpha_intra + c) + 2(K-1)/K x S / B_nic
  + 2(K-1) alpha_inter`` (when the NIC, not the ports, bounds phase (2)), c = 8.4 us on GPUs, 0 otherwise.
* ``leader`` (version 1's "hierarchical"): (1) in each machine, a chain reduce towards the machine leader (its
  first replica), volume S, latency the sum of hop latencies; (2) a ring all-reduce across the leaders; (3) a
  chain broadcast from each leader. Machines run phases (1) and (3) in parallel. Alone, uniform:
  ``2 (S / B_intra + (m-1) alpha_intra) + 2(k-1)/k x S / B_nic + 2(k-1) alpha_inter``.
* ``ps``: (1) push: every replica other than the server sends S to the server (incast: they share the
  server's links); (2) pull: the server sends S to each. A tensor's pull waits for its push. Alone, when all w
  workers' routes share the server's narrowest link B: ``2 (w S / B + alpha)`` (max-min filling otherwise).
* ``allgather`` (for sufficient factors and ZeRO's weight gathers): one ring coflow, volume (n-1)/n x S_total,
  n-1 steps: the second half of the ring all-reduce.
* ``reducescatter`` (ZeRO's gradient sync, each replica left with the sum of its 1/n): one ring coflow, volume
  (n-1)/n x S, n-1 steps: the first half of the ring all-reduce (``reducescatter`` then ``allgather`` of S moves
  and waits exactly what ``ring`` does). Alone: ``(n-1)/n x S x max_l (w_l / cap_l) + (n-1) x max alpha``.
* ``hierarchical-reducescatter`` / ``hierarchical-allgather`` (ZeRO over a ``hierarchical`` bucket): the two
  halves of ``hierarchical``: (1) then each shard's ring reduce-scatter across the machines (volume
  (K-1)/K x S/k, K-1 steps), and each shard's ring all-gather across the machines then (3). NCCL and gloo have no
  tree, leader or ps form of these two collectives: ZeRO runs them as rings (`zero_collective`).

**NCCL's latencies** (`tag.cost.nccl`, from NVIDIA/nccl ``tuning.cc``) apply when every device of the sync is a
GPU (deploy runs NCCL there, gloo on CPUs): each tree step adds NCCL's Tree/Simple minus Ring/Simple per-step
latency of its hardware (24.6 us over NVLink, 22.3 us over PCIe, 14 us across machines; a tree level forwards a
whole chunk before the next starts), the tree moves at NCCL's 0.92 of its links (its coflow carries
S/2 / 0.92), and ``hierarchical`` adds one Ring/Simple base latency (8.4 us) to each of phases (1) and (3) (two
more NCCL calls than a ring). Ring, leader, ps and allgather carry none: their per-step
latency is the route's (the topology defaults, 2 us inside a machine and 10 us across, sit near NCCL's
Ring/Simple 3.4 and 14 us), so version-1 plans simulate as before. NCCL's Tree/Simple base latency (0) is below
the ring's (8.4); that difference is not credited to the tree.

**Measured collective rate** (`ring_gbps`, optional): a collective library's ring can be slower per hop than
its links carry point to point (both directions of a hop share the ranks' cores, plus the reduction: gloo on
loopback moves 13.6 Gbit/s per ring hop against 42.3 point to point). When the cost model offers one
(`collective_hop_gbps`), a ring or tree coflow whose uncontended rate ``min_l cap_l / w_l`` exceeds
``ring_gbps / h`` carries ``volume x h x that rate / ring_gbps`` bytes instead, h being the most times one hop
(a pair of devices, one direction) appears in the coflow (1 for a ring; 2 for the double tree, whose two trees
both use each chain hop): alone it then takes exactly ``h x volume / ring_gbps`` (each hop moves at the measured
rate), and it still shares its links max-min fairly with other flows. None (every cost model without the method) leaves
the coflows as above.

**Measured step latency** (`step_us`, optional): one step of a collective call on real ranks can take longer than
its route's point-to-point latency (the library's per-call and per-step work: gloo on 2 local CPU ranks all-reduces
4 bytes in 0.25 ms where a message takes 90 us). When the cost model offers one (`collective_step_us`, fitted by
`tag profile links`), every ring, tree and hierarchical step (and each hop of the leader form's ring) takes
``max(route latency, step_us)`` (`step_latency_us`); point-to-point transfers, ps and the leader's chains keep the
route's.

**Measured call cost on CPU ranks** (`call_ms`, optional): `tag.sim.cpu_calls` (a floor on each call's latency).
"""

from __future__ import annotations

from collections import Counter
from functools import partial

from tag.cost import comm, nccl
from tag.sim.flows import FlowSpec, _capped, _with_latency, p2p_spec
from tag.topology.cluster import Cluster


def _coflow(cluster: Cluster, hops: list[tuple[int, int]], volume: float, latency_ms: float) -> FlowSpec:
    w: dict[int, float] = {}
    for a, b in hops:
        for l in cluster.routes[a][b]:
            w[l] = w.get(l, 0.0) + 1.0
    links = tuple(sorted(w))
    return FlowSpec(links, tuple(w[l] for l in links), float(volume), latency_ms, hops[0][0], hops[-1][1])


def step_latency_us(route_us: float, step_us: float | None) -> float:
    """One collective step's latency, us: the route's, or the measured per-step latency of the collective library
    when that is longer (`step_us`, module docstring; None: the route's).

    >>> step_latency_us(90.0, 240.0), step_latency_us(10.0, None), step_latency_us(300.0, 240.0)
    (240.0, 10.0, 300.0)
    """
    return route_us if step_us is None else max(route_us, float(step_us))


def rings_spec(cluster: Cluster, rings: list[tuple[int, ...]], volume: float, steps: int,
               ring_gbps: float | None = None, step_us: float | None = None) -> FlowSpec:
    """Rings progressing in lockstep as one coflow (each ring over its devices in the given order): per-hop
    `volume` bytes, `steps` x the largest hop latency of all rings (at least `step_us`); with `ring_gbps` capped
    (module docstring)."""
    hops = [(r[i], r[(i + 1) % len(r)]) for r in rings for i in range(len(r))]
    alpha_ms = step_latency_us(max(float(cluster.latency_us[a][b]) for a, b in hops), step_us) / 1e3
    return _capped(cluster, _coflow(cluster, hops, volume, steps * alpha_ms), ring_gbps)


def ring_spec(cluster: Cluster, devices: tuple[int, ...], volume: float, steps: int,
              ring_gbps: float | None = None, step_us: float | None = None) -> FlowSpec:
    """A ring coflow over `devices` (in the given order): per-hop `volume` bytes, `steps` x largest hop
    latency (at least `step_us`); with `ring_gbps` (measured per-hop rate, 10^9 bit/s) capped at that rate
    (module docstring)."""
    return rings_spec(cluster, [devices], volume, steps, ring_gbps, step_us)


def chain_spec(cluster: Cluster, chain: list[int], nbytes: float) -> FlowSpec:
    """A pipelined chain chain[0] -> chain[1] -> ... carrying `nbytes`; latency is the sum of hops."""
    hops = list(zip(chain, chain[1:]))
    lat_ms = sum(float(cluster.latency_us[a][b]) for a, b in hops) / 1e3
    return _coflow(cluster, hops, nbytes, lat_ms)


def machine_members(cluster: Cluster, devices: tuple[int, ...]) -> list[list[int]]:
    """`devices` grouped by machine: machines in order of their first device, devices in the given order."""
    by_machine: dict[str, list[int]] = {}
    for d in devices:
        by_machine.setdefault(cluster.devices[d].machine, []).append(d)
    return list(by_machine.values())


def uses_nccl(cluster: Cluster, devices: tuple[int, ...]) -> bool:
    """Whether NCCL runs this sync (every device a GPU; deploy uses gloo on CPUs): its latencies then apply."""
    return all(cluster.devices[d].type.kind == "gpu" for d in devices)


def allreduce_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                     ring_gbps: float | None = None, step_us: float | None = None) -> list[list[FlowSpec]]:
    """Ring all-reduce of `nbytes` over `devices` (topology order)."""
    n = len(devices)
    if n < 2:
        return []
    return [[ring_spec(cluster, devices, comm.ring_allreduce_volume_bytes(nbytes, n), comm.ring_allreduce_steps(n),
                       ring_gbps, step_us)]]


def allgather_phases(cluster: Cluster, devices: tuple[int, ...], total_bytes: float,
                     ring_gbps: float | None = None, step_us: float | None = None) -> list[list[FlowSpec]]:
    """Ring all-gather whose gathered result has `total_bytes`."""
    n = len(devices)
    if n < 2:
        return []
    return [[ring_spec(cluster, devices, comm.allgather_volume_bytes(total_bytes, n), n - 1, ring_gbps, step_us)]]


def reducescatter_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                         ring_gbps: float | None = None, step_us: float | None = None) -> list[list[FlowSpec]]:
    """Ring reduce-scatter of `nbytes` over `devices` (topology order), each left with the sum of its 1/n: the
    first half of `allreduce_phases` (module docstring)."""
    n = len(devices)
    if n < 2:
        return []
    volume = comm.reduce_scatter_volume_bytes(nbytes, [1.0 / n] * n)
    return [[ring_spec(cluster, devices, volume, n - 1, ring_gbps, step_us)]]


def _machine_rings(members: list[list[int]], n_shards: int) -> list[tuple[int, ...]]:
    """The cross-machine rings of the hierarchical forms: the j-th devices of every machine, j < n_shards."""
    return [tuple(m[j] for m in members) for j in range(n_shards)]


def _hierarchical_parts(cluster: Cluster, devices: tuple[int, ...], nbytes: float, ring_gbps: float | None,
                        step_us: float | None) -> tuple[list[list[int]], int, list[FlowSpec]]:
    """(devices by machine, shard count k, phase (1)) of the hierarchical forms: a ring reduce-scatter inside every
    machine of two or more devices, its first k devices owning 1/k each (phase (3), the all-gather, moves the same
    the other way), with NCCL's extra call latency on GPUs."""
    members = machine_members(cluster, devices)
    n_shards = min(len(m) for m in members)
    call_ms = nccl.extra_call_us() / 1e3 if uses_nccl(cluster, devices) else 0.0
    intra: list[FlowSpec] = []
    for m in members:
        if len(m) > 1:
            owned = [1.0 / n_shards if j < n_shards else 0.0 for j in range(len(m))]
            volume = comm.reduce_scatter_volume_bytes(nbytes, owned)
            intra.append(_with_latency(ring_spec(cluster, tuple(m), volume, len(m) - 1, ring_gbps, step_us), call_ms))
    return members, n_shards, intra


def hierarchical_half_phases(half: str, cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                             ring_gbps: float | None = None, step_us: float | None = None) -> list[list[FlowSpec]]:
    """One half of `hierarchical_phases` (module docstring): ``half`` "reducescatter" is phase (1) then each
    shard's ring reduce-scatter across the machines; "allgather" each shard's ring all-gather across the machines
    then phase (3)."""
    if len(devices) < 2:
        return []
    members, n_shards, intra = _hierarchical_parts(cluster, devices, nbytes, ring_gbps, step_us)
    k = len(members)
    across = []
    if k > 1:
        volume = comm.reduce_scatter_volume_bytes(nbytes / n_shards, [1.0 / k] * k)
        across = [[rings_spec(cluster, _machine_rings(members, n_shards), volume, k - 1, ring_gbps, step_us)]]
    inside = [intra] if intra else []
    return inside + across if half == "reducescatter" else across + inside


def zero_collective(kind: str, algorithm: str) -> str:
    """The `sync_phases` method of ZeRO's `kind` ("reducescatter" or "allgather") for a bucket of `algorithm`: the
    hierarchical half for ``hierarchical``, else the ring form (NCCL and gloo run these two collectives as rings).

    >>> zero_collective("reducescatter", "hierarchical"), zero_collective("allgather", "tree")
    ('hierarchical-reducescatter', 'allgather')
    """
    return f"hierarchical-{kind}" if algorithm == "hierarchical" else kind


def btree_parent(rank: int, n: int) -> int:
    """The parent of `rank` in NCCL's binary tree over n ranks rooted at 0 (``ncclGetBtree``; -1 for the root):
    clear the lowest set bit and set the next one up, or only clear it when that is out of range.

    >>> [btree_parent(r, 8) for r in range(8)]
    [-1, 2, 4, 2, 0, 6, 4, 6]
    """
    if rank == 0:
        return -1
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < n else rank ^ bit


def double_tree_parents(n: int) -> tuple[list[int], list[int]]:
    """Parents in NCCL's two complementary trees over n ranks (``ncclGetDtree``): the binary tree, and its mirror
    (n even) or its shift by one rank (n odd).

    >>> double_tree_parents(4)
    ([-1, 2, 0, 2], [1, 3, 1, -1])
    """
    first = [btree_parent(r, n) for r in range(n)]
    if n % 2 == 1:
        second = [-1 if (u := btree_parent((r - 1) % n, n)) < 0 else (u + 1) % n for r in range(n)]
    else:
        second = [-1 if (u := btree_parent(n - 1 - r, n)) < 0 else n - 1 - u for r in range(n)]
    return first, second


def _tree_step_us(cluster: Cluster, a: int, b: int, nccl_on: bool, step_us: float | None = None) -> float:
    """A tree step's latency a -> b, us: the route's (at least `step_us`), plus NCCL's extra tree step of its
    hardware (docstring)."""
    lat = step_latency_us(float(cluster.latency_us[a][b]), step_us)
    if not nccl_on:
        return lat
    da, db = cluster.devices[a], cluster.devices[b]
    if da.machine != db.machine:
        return lat + nccl.tree_step_extra_us(nccl.NET)
    fabric = next(m.intra_bandwidth_gbps for m in cluster.machines if m.name == da.machine)
    return lat + nccl.tree_step_extra_us(nccl.intra_hardware(fabric))


def tree_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                ring_gbps: float | None = None, step_us: float | None = None) -> list[list[FlowSpec]]:
    """NCCL's double binary tree all-reduce of `nbytes`: chains inside machines, two complementary binary trees
    over the machines' heads, S/2 up and down each (one coflow; module docstring)."""
    if len(devices) < 2:
        return []
    on = uses_nccl(cluster, devices)
    if not on:
        from tag.sim.gloo_tree import gloo_tree_phases

        return gloo_tree_phases(cluster, devices, nbytes, ring_gbps)
    members = machine_members(cluster, devices)
    heads = [m[0] for m in members]
    chain_hops = [h for m in members for a, b in zip(m, m[1:]) for h in ((b, a), (a, b))]
    chain_up = [sum(_tree_step_us(cluster, b, a, on, step_us) for a, b in zip(m, m[1:])) for m in members]
    chain_down = [sum(_tree_step_us(cluster, a, b, on, step_us) for a, b in zip(m, m[1:])) for m in members]
    hops: list[tuple[int, int]] = []
    latency_us = 0.0
    for parents in double_tree_parents(len(members)):
        hops += chain_hops
        up, down = 0.0, 0.0
        for i, p in enumerate(parents):
            if p >= 0:
                hops += [(heads[i], heads[p]), (heads[p], heads[i])]
            u, d, node = chain_up[i], chain_down[i], i
            while parents[node] >= 0:
                u += _tree_step_us(cluster, heads[node], heads[parents[node]], on, step_us)
                d += _tree_step_us(cluster, heads[parents[node]], heads[node], on, step_us)
                node = parents[node]
            up, down = max(up, u), max(down, d)
        latency_us = max(latency_us, up + down)
    volume = nbytes / 2.0 / nccl.TREE_BUSBW_FACTOR
    repeats = max(Counter(hops).values())
    return [[_capped(cluster, _coflow(cluster, hops, volume, latency_us / 1e3), ring_gbps, repeats)]]


def hierarchical_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                        ring_gbps: float | None = None, step_us: float | None = None) -> list[list[FlowSpec]]:
    """Ring reduce-scatter inside each machine, one ring all-reduce per shard across the machines, ring all-gather
    inside (NCCL/Horovod form; shards and uneven machines as in the module docstring)."""
    if len(devices) < 2:
        return []
    members, n_shards, intra = _hierarchical_parts(cluster, devices, nbytes, ring_gbps, step_us)
    phases = [intra] if intra else []
    k = len(members)
    if k > 1:
        rings = _machine_rings(members, n_shards)
        volume = comm.ring_allreduce_volume_bytes(nbytes / n_shards, k)
        phases.append([rings_spec(cluster, rings, volume, comm.ring_allreduce_steps(k), ring_gbps, step_us)])
    if intra:
        phases.append(list(intra))  # the all-gather moves what the reduce-scatter moved, the other way round
    return phases


def leader_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                  ring_gbps: float | None = None, step_us: float | None = None) -> list[list[FlowSpec]]:
    """Chain reduce in each machine, ring all-reduce across machine leaders, chain broadcast back (version 1's
    "hierarchical")."""
    members = machine_members(cluster, devices)
    leaders = tuple(m[0] for m in members)
    reduce = [chain_spec(cluster, m[::-1], nbytes) for m in members if len(m) > 1]
    bcast = [chain_spec(cluster, m, nbytes) for m in members if len(m) > 1]
    phases = [reduce] if reduce else []
    phases += allreduce_phases(cluster, leaders, nbytes, ring_gbps, step_us)
    if bcast:
        phases.append(bcast)
    return phases


def ps_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float, server: int) -> list[list[FlowSpec]]:
    """Push to `server` from every other replica, then pull back."""
    workers = [d for d in devices if d != server]
    if not workers:
        return []
    push = [p2p_spec(cluster, d, server, nbytes) for d in workers]
    pull = [p2p_spec(cluster, server, d, nbytes) for d in workers]
    return [push, pull]


SYNC_PHASES = {"ring": allreduce_phases, "allreduce": allreduce_phases, "tree": tree_phases,
               "hierarchical": hierarchical_phases, "leader": leader_phases, "allgather": allgather_phases,
               "reducescatter": reducescatter_phases, "hierarchical-reducescatter": partial(hierarchical_half_phases, "reducescatter"),
               "hierarchical-allgather": partial(hierarchical_half_phases, "allgather")}


def sync_phases(method: str, cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                server: int | None = None, ring_gbps: float | None = None,
                step_us: float | None = None, call_ms: dict | None = None) -> list[list[FlowSpec]]:
    """The phases of one gradient sync of `nbytes` over `devices` by `method` (one of `SYNC_PHASES` or ``ps``;
    `ring_gbps` / `step_us`: the measured per-hop rate and per-step latency of the collective library's ring and
    tree steps, or None; `call_ms`: {call kind: measured cost of one call on CPU ranks, ms} or None, applied when
    not every device is a GPU; see the module docstring)."""
    if method == "ps":
        phases = ps_phases(cluster, devices, nbytes, devices[0] if server is None else server)
    else:
        build = SYNC_PHASES.get(method)
        if build is None:
            raise ValueError(f"unknown sync method {method!r} (expected ps or one of {', '.join(SYNC_PHASES)})")
        phases = build(cluster, devices, nbytes, ring_gbps, step_us)
    if call_ms and not uses_nccl(cluster, devices):
        from tag.sim.cpu_calls import cpu_call_kind, with_call_floor

        kind = cpu_call_kind(method)
        phases = with_call_floor(phases, call_ms.get(kind), whole_call=kind == "allreduce")
    return phases
