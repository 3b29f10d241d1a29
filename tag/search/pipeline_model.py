"""The pipeline search's stage model: the time and memory of one stage (a run of groups on a block of devices) for
one micro-batch count, from the cost model — the stage_ms the DP (`tag.search.pipeline_dp`) minimises.

For a stage of groups [lo, hi) on devices D and m micro-batches of b = B / m rows:
- rows: each device d of D computes r_d rows of every micro-batch (sum r_d = b, r_d >= 1), in proportion to its
  speed on the stage (1 / time per row at the even share), capped by its memory; unsplittable groups run all b
  rows on the host (the first of the fastest devices);
- compute_ms = max_d time(d, r_d) (+ the unsplittable groups at b rows on the host);
- transfer_ms = the busiest NIC direction of one micro-batch: activations come in from the previous stage and
  gradients go back to it (in_bytes per row each way), activations go out to the next stage and gradients come
  back (out_bytes per row); every link is full duplex, so each direction carries rows x (in_bytes + out_bytes).
  Each tensor crosses a boundary once however many groups beyond it read it, as the simulator sends it
  (`tag.graph.coarsen.cross_tensors`, `BoundaryBytes`).
  A device on a neighbour's machine moves its rows over its own pair link; every other machine of the block moves
  the rows of all its devices through its one route (its NIC); in_ms / out_ms are the two sides alone (the
  time one micro-batch's activations take to cross that boundary, which the schedule's round trip pays);
- sync_ms = all-reduce of the stage's parameter bytes over D: the cheaper of a ring (2 (n - 1) / n x bytes / the
  narrowest bandwidth between consecutive devices of D) and, over several machines, the hierarchical form
  (`StageModel._sync_ms`); 0 for one device;
- steady_ms = m x max(compute_ms, transfer_ms) + transfer_ms (a micro-batch's transfers overlap the next one's
  compute; one transfer stays exposed), exposed sync = max(0, sync_ms - 2/3 compute_ms) (the sync's buckets
  overlap the last backward), stage time = their sum. A pipeline pays the slowest stage's steady part and,
  once at the end, the largest exposed sync (`tag.search.pipeline_dp.best_capped_cuts`).
Memory of device d: fixed + per_row x r_d x in_flight <= 0.97 x usable, with (fixed, per_row) from
`tag.search.starts.stage_cap_rows` and in_flight the most micro-batches the schedule keeps alive
(`tag.strategy.pipeline.max_in_flight`; 1F1B: min(S - s, m)).
Group times at any row count are knot-interpolated (`tag.search.space.knot_interpolated_ms`) from prefix sums
over the groups at powers of two, so a stage costs O(types) look-ups.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from tag.graph.coarsen import cross_tensors
from tag.search.starts import MEMORY_SAFETY, stage_cap_rows

BACKWARD_SHARE = 2.0 / 3.0  # backward's share of forward + backward (twice the forward's FLOPs)


@dataclass(frozen=True)
class StageRows:
    """One stage's solution for one micro-batch count: micro rows per device position in the block, times (ms)."""

    micro_rows: tuple[int, ...]  # per device of the block, in block order
    compute_ms: float
    transfer_ms: float
    sync_ms: float
    host: int  # block position of the device that runs the unsplittable groups
    in_ms: float = 0.0  # one micro-batch's activations (or gradients) across the boundary with the previous stage
    out_ms: float = 0.0  # ... and with the next stage

    def per_micro_batch_ms(self) -> float:
        """A micro-batch's time in the steady state: its transfers overlap the next micro-batch's compute."""
        return max(self.compute_ms, self.transfer_ms)

    def exposed_sync_ms(self) -> float:
        """The sync's part the last micro-batch's backward (2/3 of its compute) does not hide: buckets start as
        their gradients are ready."""
        return max(0.0, self.sync_ms - BACKWARD_SHARE * self.compute_ms)

    def steady_ms(self, micro_batches: int) -> float:
        """m micro-batches at the steady-state rate and the one transfer no compute hides: the part of the stage
        the pipeline's steady state pays (the slowest stage's sets the pace)."""
        return micro_batches * self.per_micro_batch_ms() + self.transfer_ms

    def stage_ms(self, micro_batches: int) -> float:
        """The stage alone: its steady part and its exposed sync."""
        return self.steady_ms(micro_batches) + self.exposed_sync_ms()


class BoundaryBytes:
    """Bytes per row crossing stage boundaries, each tensor once per receiving stage (`cross_tensors`: a tensor
    read by several groups is one tensor with all its reader groups, and a runtime sends it once to a device
    hosting several of them). Built once per group graph and shared by the stage models of one search.

    For a stage of groups [lo, hi), with a tensor t made by group src(t) and read by groups dsts(t):
        into(lo, hi) = sum of bytes_per_row(t) over t with src(t) < lo and some reader in [lo, hi),
        out(lo, hi)  = sum of bytes_per_row(t) over t with lo <= src(t) < hi and some reader >= hi,
    and the cut before group i carries across(i) = out(0, i) (t made before i, read at or after i). Per edge
    (one per consuming group) the same tensor read by two groups beyond the cut counted twice.

    >>> # h of group 0 read by groups 1 and 2 (1e6 bytes per row): into(1, 3) == 1e6 (per edge it was 2e6)
    """

    def __init__(self, gg):
        # (src, readers ascending, bytes per row) per tensor
        self.tensors = [(t.src, t.dsts, t.bytes_per_row) for t in cross_tensors(gg) if t.bytes_per_row > 0]
        self._memo: dict = {}

    def into_out(self, lo: int, hi: int) -> tuple[float, float]:
        """(into(lo, hi), out(lo, hi)), bytes per row (memoised)."""
        key = (lo, hi)
        v = self._memo.get(key)
        if v is None:
            into = out = 0.0
            for src, dsts, nbytes in self.tensors:
                if src < lo:
                    j = bisect_left(dsts, lo)
                    if j < len(dsts) and dsts[j] < hi:
                        into += nbytes
                elif src < hi and dsts[-1] >= hi:
                    out += nbytes
            v = self._memo[key] = (into, out)
        return v

    def across(self, i: int) -> float:
        """Bytes per row crossing the cut before group i: out(0, i)."""
        return self.into_out(0, i)[1]


class StageModel:
    """Stage costs of one (model, cluster, cost model, optimizer, batch) over a fixed device order.

    order: device indices (topology indices) in the order the DP cuts them into blocks; boundary: the group
    graph's `BoundaryBytes` (shared by the models of one search; built here when not given).
    """

    def __init__(self, gg, cluster, cost, optimizer: str, batch: int, order: list[int],
                 boundary: BoundaryBytes | None = None):
        self.gg, self.cluster, self.batch, self.order = gg, cluster, batch, list(order)
        self.boundary = boundary if boundary is not None else BoundaryBytes(gg)
        self.optimizer = optimizer
        types: dict[str, object] = {}
        for d in cluster.devices:
            types.setdefault(d.type.name, d.type)
        self.types = list(types.values())
        self.type_of = [self.types.index(types[cluster.devices[d].type.name]) for d in self.order]
        self.knots = sorted({1 << k for k in range(max(1, batch).bit_length()) if (1 << k) <= batch} | {batch})
        n_g = gg.n_groups
        split = np.array([g.splittable for g in gg.groups], dtype=bool)
        # prefix[t][k][g]: sum over groups < g of fwd + bwd at knots[k] rows on type t, splittable / not
        self.prefix_split = np.zeros((len(self.types), len(self.knots), n_g + 1))
        self.prefix_whole = np.zeros((len(self.types), len(self.knots), n_g + 1))
        for ti, t in enumerate(self.types):
            for ki, r in enumerate(self.knots):
                ms = np.array([cost.group_fwd_ms(g, t, r) + cost.group_bwd_ms(g, t, r) for g in range(n_g)])
                self.prefix_split[ti, ki, 1:] = np.cumsum(np.where(split, ms, 0.0))
                self.prefix_whole[ti, ki, 1:] = np.cumsum(np.where(split, 0.0, ms))
        self.any_whole = np.concatenate([[0], np.cumsum(~split)])
        self.param_prefix = np.concatenate([[0.0], np.cumsum([g.param_bytes for g in gg.groups])])
        bw = np.asarray(cluster.bandwidth_gbps, dtype=float)[np.ix_(self.order, self.order)]
        self.bw_bytes_per_ms = bw * 1e9 / 8 / 1e3
        self._bw = self.bw_bytes_per_ms.tolist()  # the same doubles as Python floats: scalar reads without numpy
        self.usable = [cluster.devices[d].type.usable_memory_bytes * MEMORY_SAFETY for d in self.order]
        self._mem: dict = {}
        self._range: dict = {}
        self.machine = [cluster.devices[d].machine for d in self.order]
        self.first_of_machine: dict = {}
        for p, mach in enumerate(self.machine):
            self.first_of_machine.setdefault(mach, p)
        self._split_lists = self.prefix_split.tolist()
        self._whole_lists = self.prefix_whole.tolist()
        self._sync: dict = {}
        self._kind: dict = {}  # (dlo, dhi) -> the id of the block's (device type, usable memory) per position
        self._kind_ids: dict = {}
        self._rows: dict = {}  # (lo, hi, rows, in-flight, block kind) -> `_compute_part`
        self._moved: dict = {}  # (dlo, dhi, micro rows, bytes in, bytes out per row) -> `_transfer_ms`

    # --- group ranges -------------------------------------------------------------------------------------------

    def range_ms(self, ti: int, lo: int, hi: int, rows: float, whole: bool = False) -> float:
        """fwd + bwd of groups [lo, hi) (splittable ones, or with whole=True the others) at `rows` rows on type
        ti, knot-interpolated, ms (memoised)."""
        if rows <= 0 or hi <= lo:
            return 0.0
        key = (ti, lo, hi, rows, whole)
        v = self._range.get(key)
        if v is None:
            v = self._range[key] = self._range_ms(ti, lo, hi, rows, whole)
        return v

    def _range_ms(self, ti: int, lo: int, hi: int, rows: float, whole: bool) -> float:
        p = self._whole_lists if whole else self._split_lists
        knots = self.knots
        if rows >= knots[-1]:
            return (p[ti][-1][hi] - p[ti][-1][lo]) * rows / knots[-1]
        k = bisect_right(knots, rows) - 1
        a = p[ti][k][hi] - p[ti][k][lo]
        if knots[k] == rows:
            return a
        b = p[ti][k + 1][hi] - p[ti][k + 1][lo]
        return a + (b - a) * (rows - knots[k]) / (knots[k + 1] - knots[k])

    def memory(self, lo: int, hi: int) -> tuple[float, float]:
        """(fixed bytes, bytes per row) of a device running groups [lo, hi) (`stage_cap_rows`)."""
        key = (lo, hi)
        if key not in self._mem:
            self._mem[key] = stage_cap_rows(self.gg, list(range(lo, hi)), self.optimizer)
        return self._mem[key]

    def cross_bytes_per_row(self, lo: int, hi: int) -> tuple[float, float]:
        """(bytes per row into groups [lo, hi) from earlier groups, bytes per row out of them to later groups),
        each tensor once (`BoundaryBytes.into_out`)."""
        return self.boundary.into_out(lo, hi)

    def fits(self, lo: int, hi: int, dlo: int, micro_rows, in_flight: int) -> bool:
        """True when every device of the block (from position dlo) holds groups [lo, hi) with its micro rows x
        `in_flight` micro-batches alive."""
        fixed, per_row = self.memory(lo, hi)
        return all(fixed + per_row * r * in_flight <= self.usable[dlo + i] for i, r in enumerate(micro_rows))

    def _boundary_ms(self, q: int, dlo: int, rows, bytes_per_row: float, per_machine_ms: dict,
                     per_device_ms: list) -> float:
        """Add, per direction, moving `bytes_per_row` x rows between the neighbour at position q and the block from
        dlo: devices on q's machine over their own pair link (`per_device_ms`), every other machine of the block
        through its one route from q (its NIC, shared by its devices: `per_machine_ms`). Returns this side's time
        alone (its slowest machine or device)."""
        worst = 0.0
        machine, bw_q, mq = self.machine, self._bw[q], self.machine[q]
        by_machine: dict = {}  # rows per machine of the block, in block order
        for i, r in enumerate(rows):
            p = dlo + i
            mp = machine[p]
            by_machine[mp] = by_machine.get(mp, 0) + r
            if mp == mq:
                t = bytes_per_row * r / bw_q[p]
                per_device_ms[i] += t
                if t > worst:
                    worst = t
        for mach, r in by_machine.items():
            if mach != mq:
                t = bytes_per_row * r / bw_q[self.first_of_machine[mach]]
                per_machine_ms[mach] = per_machine_ms.get(mach, 0.0) + t
                if t > worst:
                    worst = t
        return worst

    def _sync_ms(self, dlo: int, dhi: int, params_bytes: float) -> float:
        """All-reduce of `params_bytes` over block positions [dlo, dhi): the cheaper of a ring (2 (n - 1) / n x
        bytes over its narrowest hop) and, across k machines, the hierarchical form (reduce-scatter and
        all-gather inside each machine, 2 (k - 1) / k x bytes through each machine's route to the next)."""
        n = dhi - dlo
        if n < 2 or params_bytes <= 0:
            return 0.0
        bw = self._bw
        ring = 2.0 * (n - 1) / n * params_bytes / min(bw[p][p + 1] for p in range(dlo, dhi - 1))
        firsts = [p for p in range(dlo, dhi) if p == dlo or self.machine[p] != self.machine[p - 1]]
        k = len(firsts)
        if k < 2:
            return ring
        inside = 0.0
        for a, b in zip(firsts, firsts[1:] + [dhi]):
            if b - a > 1:
                inside = max(inside, 2.0 * (b - a - 1) / (b - a) * params_bytes
                             / min(bw[p][p + 1] for p in range(a, b - 1)))
        across = 2.0 * (k - 1) / k * params_bytes / min(bw[a][b] for a, b in zip(firsts, firsts[1:]))
        return min(ring, inside + across)

    # --- one stage ----------------------------------------------------------------------------------------------

    def stage(self, lo: int, hi: int, dlo: int, dhi: int, micro_batches: int, in_flight: int) -> StageRows | None:
        """Rows and times of groups [lo, hi) on block positions [dlo, dhi) with m micro-batches of which
        `in_flight` are alive at once; None when the block cannot hold the stage or has more devices than rows."""
        b = self.batch // micro_batches
        n = dhi - dlo
        if n < 1 or b < n or hi <= lo:
            return None
        kind = self._kind.get((dlo, dhi))
        if kind is None:  # blocks alike share an id
            sig = tuple((self.type_of[p], self.usable[p]) for p in range(dlo, dhi))
            kind = self._kind[dlo, dhi] = self._kind_ids.setdefault(sig, len(self._kind_ids))
        key = (lo, hi, b, in_flight, kind)
        part = self._rows.get(key, False)
        if part is False:  # blocks of the same device types and memory in the same order share it
            part = self._rows[key] = self._compute_part(lo, hi, dlo, dhi, b, in_flight)
        if part is None:
            return None
        rows, compute, host = part
        into, out = self.cross_bytes_per_row(lo, hi)
        tkey = (dlo, dhi, rows, into, out)
        moved = self._moved.get(tkey)
        if moved is None:  # stages of other groups with the same rows and boundary bytes share it
            moved = self._moved[tkey] = self._transfer_ms(dlo, dhi, rows, into, out)
        transfer, in_ms, out_ms = moved
        return StageRows(rows, compute, transfer, self.sync_ms(dlo, dhi, lo, hi), host, in_ms, out_ms)

    def _transfer_ms(self, dlo: int, dhi: int, rows: tuple[int, ...], into: float,
                     out: float) -> tuple[float, float, float]:
        """(transfer_ms, in_ms, out_ms) of a stage on block positions [dlo, dhi) with these micro rows, receiving
        `into` and sending `out` bytes per row (`_boundary_ms` on both sides; module docstring)."""
        per_machine: dict = {}
        per_device = [0.0] * (dhi - dlo)
        side = [0.0, 0.0]
        for k, (q, nbytes) in enumerate(((dlo - 1, into), (dhi, out))):
            if nbytes > 0 and 0 <= q < len(self.order):
                side[k] = self._boundary_ms(q, dlo, rows, nbytes, per_machine, per_device)
        return max(max(per_machine.values(), default=0.0), max(per_device)), side[0], side[1]

    def _compute_part(self, lo: int, hi: int, dlo: int, dhi: int, b: int,
                      in_flight: int) -> tuple[tuple[int, ...], float, int] | None:
        """`stage`'s (micro rows, compute_ms, host) of groups [lo, hi) on block positions [dlo, dhi) at b rows per
        micro-batch; None when the block cannot hold it. It reads the block's device types and usable memory only."""
        n = dhi - dlo
        fixed, per_row = self.memory(lo, hi)
        devs = range(dlo, dhi)
        caps = []
        for p in devs:
            free = self.usable[p] - fixed
            if free <= 0:
                return None
            caps.append(b if per_row <= 0 else min(b, int(free // (per_row * in_flight))))
        if min(caps) < 1 or sum(caps) < b:
            return None
        probe = max(1, b // n)
        by_type: dict[int, float] = {}  # rows per ms at the probe, per device type of the block
        for p in devs:
            ti = self.type_of[p]
            if ti not in by_type:
                by_type[ti] = probe / max(1e-12, self.range_ms(ti, lo, hi, probe)
                                          + self.range_ms(ti, lo, hi, probe, whole=True) / n)
        speed = [by_type[self.type_of[p]] for p in devs]
        rows = _capped_shares(b, speed, caps)
        if rows is None:
            return None
        times = [self.range_ms(self.type_of[p], lo, hi, r) for p, r in zip(devs, rows)]
        host = max(range(n), key=lambda i: (speed[i], -i))
        if self.any_whole[hi] > self.any_whole[lo]:
            times[host] += self.range_ms(self.type_of[dlo + host], lo, hi, b, whole=True)
        return tuple(rows), max(times), host

    def sync_ms(self, dlo: int, dhi: int, lo: int, hi: int) -> float:
        """All-reduce of the parameters of groups [lo, hi) over block positions [dlo, dhi) (`_sync_ms`), ms
        (memoised)."""
        key = (lo, hi, dlo, dhi)
        sync = self._sync.get(key)
        if sync is None:
            sync = self._sync[key] = self._sync_ms(dlo, dhi, float(self.param_prefix[hi] - self.param_prefix[lo]))
        return sync


def _capped_shares(total: int, weights: list[float], caps: list[int]) -> list[int] | None:
    """Integers r_i >= 1, r_i <= caps[i], summing to `total`, in proportion to `weights` where caps allow
    (water filling; largest remainders get the leftover rows). None when the caps cannot hold `total`.

    Water filling: the free replicas share the rows left, share_i = left x w_i / sum of the free w; those whose
    share exceeds their cap take the cap and leave the free set; repeat. Each free replica then takes
    max(1, min(cap, floor(share))) rows, and the rows still missing (or in excess) go one at a time to the free
    replicas by largest fractional part (the excess comes back from the smallest parts first, then the capped).

    >>> _capped_shares(8, [3.0, 1.0], [8, 8])
    [6, 2]
    >>> _capped_shares(8, [3.0, 1.0], [5, 8])
    [5, 3]
    """
    n = len(weights)
    if sum(caps) < total or total < n:
        return None
    capped = [False] * n
    left = total
    free = list(range(n))
    share: list[float] = []  # share of free[k]
    while free:
        w = sum([weights[i] for i in free])
        share = [left * weights[i] / w for i in free]
        over = [i for i, x in zip(free, share) if x > caps[i]]
        if not over:
            break
        for i in over:
            capped[i] = True
            left -= caps[i]
        free = [i for i in free if not capped[i]]
    else:
        share = []
    rows = [caps[i] if capped[i] else 0 for i in range(n)]
    for i, x in zip(free, share):
        rows[i] = max(1, min(caps[i], int(math.floor(x))))
    diff = total - sum(rows)
    if diff == 0:
        return rows
    order = [i for _, i in sorted(zip([-(x - math.floor(x)) for x in share], free))]
    while diff > 0:
        moved = False
        for i in order:
            if diff and rows[i] < caps[i]:
                rows[i] += 1
                diff -= 1
                moved = True
        if not moved:
            return None
    while diff < 0:
        moved = False
        for i in order[::-1] + [i for i in range(n) if capped[i]]:
            if diff and rows[i] > 1:
                rows[i] -= 1
                diff += 1
                moved = True
        if not moved:
            return None
    return rows
