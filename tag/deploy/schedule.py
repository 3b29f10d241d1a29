"""The rank-level schedule of a plan: who runs which rows of each group, which slices move, who syncs what.

Pure functions over plain data (no torch). Every rank computes the same `Schedule` from the same plan, so
all ranks agree on the order of every transfer and collective without talking.

Devices map onto ranks in contiguous blocks of topology order (`device_ranks`): with ``nproc`` equal to
the plan's device count each device is one rank; with fewer ranks several neighbouring devices share a
process and their row slices simply concatenate (they are contiguous because rows are laid out in
topology order), so the rank holds the sum of its devices' rows. Activation slices between ranks are
exactly `tag.strategy.slices` of the rank-level row maps, the function the simulator charges. A rank
belongs to the machine of its first device (for `hierarchical` and `leader`); a `ps` server device's rank is the
server. Gradients sync by the plan's buckets (`tag.deploy.bucket_plan`), in the plan's bucket order; the parameters
of groups at ZeRO stages 1-3 leave their buckets and are reduce-scattered, one call per bucket (`tag.deploy.zero_plan`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tag.deploy.bucket_plan import SyncBucket, plan_buckets, sync_buckets  # noqa: F401 - SyncBucket re-exported
from tag.deploy.pipeline_schedule import pipeline_parts, with_pipeline
from tag.deploy.ranks import device_ranks
from tag.deploy.shard_plan import input_sources, link_groups, shard_groups, shard_syncs
from tag.deploy.zero_plan import zero_units
from tag.errors import InputError
from tag.graph.opgraph import OpGraph
from tag.graph.sfb_form import SFB_OP_TYPES, sfb_form  # the one SFB eligibility rule, shared with the simulator
from tag.strategy import Strategy, row_offsets, slices
from tag.strategy.placement import interval_slices


@dataclass(frozen=True)
class Transfer:
    """Tensor `tensor` sent from rank src to rank dst: global rows [start, start + rows), or whole if rows == 0."""

    tensor: str
    producer_group: int
    src: int
    dst: int
    start: int
    rows: int
    grad: bool = True  # whether the gradient goes back (False: a sharded consumer's other positions, `shard_plan`)

    @property
    def whole(self) -> bool:
        return self.rows == 0


@dataclass
class GroupIO:
    """What group `id` reads from outside itself and what it hands on (tensor names)."""

    id: int
    op_ids: list[int]
    act_inputs: list[tuple[str, int]]  # (tensor, producer group) for activations made by other groups
    data_inputs: list[str]
    params: list[str]
    outputs: list[str]  # tensors read by later groups or graph outputs (the loss)
    recompute: list[int] = field(default_factory=list)  # ops re-run here for row-dependent shape tensors


def shape_closure(graph: OpGraph, tensor: str) -> list[int] | None:
    """Ops that compute integer tensor `tensor` from Shape ops of batched tensors and constants only.

    Such a tensor (a batch size read off a shape, a Reshape target built from it) depends on the rows of
    the rank computing it, so a consumer re-computes it for its own rows instead of receiving it. Returns
    the op indices in topological order, or None if the tensor also depends on data values.
    """
    out: set[int] = set()

    def visit(t: str) -> bool:
        info = graph.tensors.get(t)
        if info is None or info.role in ("constant", "param") or info.producer is None:
            return info is not None and info.role in ("constant", "param")
        if torch_float(info.dtype) or info.batch_axis is not None:
            return False
        i = info.producer
        if i in out:
            return True
        op = graph.ops[i]
        if op.op_type == "Shape":
            src = graph.tensors.get(op.inputs[0])
            ok = src is not None and src.shape is not None
        else:
            ok = all(visit(x) for x in op.inputs if x)
        if ok:
            out.add(i)
        return ok

    return sorted(out) if visit(tensor) else None


def torch_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


@dataclass(frozen=True)
class SFBOp:
    """A Gemm/MatMul (or embedding Gather) whose weight gradient is formed from all-gathered sufficient factors.

    param: the root 2-D parameter W; side/trans/x_input as `tag.graph.sfb_form.SfbForm` (the op computes X M or
    M X with M = W, or W^T under Gemm transB or a Transpose(W) generator; side "gather": W[X])."""

    group: int
    op_id: int
    param: str
    ranks: tuple[int, ...]
    side: str = "right"
    trans: bool = False
    x_input: int = 0


@dataclass
class Schedule:
    n_ranks: int
    batch_size: int
    rank_machine: list[str]
    rank_rows: list[tuple[int, ...]]  # per group: rows per rank
    groups: list[GroupIO]
    transfers: list[list[Transfer]]  # per consumer group, in a fixed order
    buckets: list[SyncBucket]  # gradient syncs in the order every rank runs them
    sfb: list[SFBOp]
    param_users: dict[str, tuple[int, ...]] = field(default_factory=dict)  # param -> ranks that use it
    # a pipelined plan (`tag.deploy.pipeline_schedule.PipelinePlan`): rank_rows and transfers are then one
    # micro-batch's, batch_size the global batch; None without stages
    pipeline: object = None
    zero_units: list = field(default_factory=list)  # `tag.deploy.zero_plan.ZeroUnit`s, in group order
    recompute_groups: frozenset = frozenset()  # groups whose forward runs again before their backward
    # tensor-sharded groups (`tag.deploy.shard_plan.ShardGroup`) by group id; with any, `row_starts` gives each group's
    # first row per rank (a sharded group's ranks all hold their replica's rows) and `sources[(c, t)]`, per position
    # of consumer c, the producer placement its input t comes from and whether that position returns its gradient
    shards: dict = field(default_factory=dict)
    row_starts: list | None = None
    sources: dict = field(default_factory=dict)

    def rank_offset(self, group: int, rank: int) -> int:
        """First global row rank `rank` computes in group `group`."""
        if self.row_starts is not None:
            return self.row_starts[group][rank]
        return row_offsets(self.rank_rows[group])[rank]

    def ranks_of(self, group: int) -> tuple[int, ...]:
        return tuple(r for r, n in enumerate(self.rank_rows[group]) if n > 0)


def rank_rows(rows: tuple[int, ...], dev_rank: list[int], nproc: int) -> tuple[int, ...]:
    """Rows per rank: the sum of the rows of the devices mapped onto it (contiguous, so slices concatenate)."""
    out = [0] * nproc
    for d, n in enumerate(rows):
        out[dev_rank[d]] += n
    return tuple(out)


def group_io(graph: OpGraph, groups: list[list[int]]) -> list[GroupIO]:
    """Each group's external activation inputs, data inputs, parameters and outputs used elsewhere."""
    op_group = {}
    for g, ops in enumerate(groups):
        for i in ops:
            op_group[i] = g
    graph_outputs = set(graph.outputs)
    out = []
    for g, ops in enumerate(groups):
        produced = {t for i in ops for t in graph.ops[i].outputs}
        acts, data, params, seen, recompute = [], [], [], set(), set()
        for i in ops:
            op = graph.ops[i]
            for t in list(op.inputs) + list(op.params):
                if not t or t in produced or t in seen:
                    continue
                seen.add(t)
                info = graph.tensors.get(t)
                if info is None:
                    continue
                if info.role == "param":  # a weight, or a weight generator's output (the program holds it)
                    params.append(t)
                elif info.role == "constant":  # every rank's program makes its own
                    continue
                elif info.producer is not None:
                    closure = None if info.batch_axis is not None else shape_closure(graph, t)
                    if closure is None:
                        acts.append((t, op_group[info.producer]))
                    else:
                        recompute.update(closure)
                elif info.role == "data":
                    data.append(t)
        outputs = []
        for i in ops:
            for t in graph.ops[i].outputs:
                info = graph.tensors.get(t)
                if info is None or info.role in ("param", "constant"):
                    continue
                if t in graph_outputs or any(op_group.get(c, g) != g for c in info.consumers):
                    outputs.append(t)
        out.append(GroupIO(g, list(ops), acts, data, params, outputs, sorted(recompute)))
    return out


def build_schedule(graph: OpGraph, groups: list[list[int]], strategy: Strategy, device_machines: list[str],
                   nproc: int | None = None, plan_file: str = "plan.json") -> Schedule:
    """The rank-level schedule of `strategy` over `groups` (op index lists) with plan devices on `nproc` ranks.

    device_machines: machine name of every plan device in topology order. Raises InputError (naming
    `plan_file`) for an SFB entry the runtime cannot honour, or an ``auto`` sync the plan lists no buckets for.
    """
    if strategy.pipeline is not None:  # the schedule of one micro-batch, with the global batch and the stage plan
        for g, dec in enumerate(strategy.decisions):
            if dec.zero >= 2:
                raise InputError(plan_file, f"decisions[{g}].zero", "ZeRO stage 0 or 1 in a pipelined plan (deploy "
                                 "runs stages 2 and 3 only without stages, as DeepSpeed's pipeline engine)", str(dec.zero))
        n_dev = len(device_machines)
        nproc = n_dev if nproc is None else nproc
        micro, rank_stage = pipeline_parts(strategy, n_dev, nproc, plan_file)
        return with_pipeline(build_schedule(graph, groups, micro, device_machines, nproc, plan_file), strategy,
                             rank_stage)
    n_dev = len(device_machines)
    nproc = n_dev if nproc is None else nproc
    dev_rank = device_ranks(n_dev, nproc)
    rank_machine = [""] * nproc
    for d in reversed(range(n_dev)):
        rank_machine[dev_rank[d]] = device_machines[d]
    rrows = [rank_rows(dec.rows, dev_rank, nproc) for dec in strategy.decisions]
    ios = group_io(graph, groups)
    shards = shard_groups(graph, groups, strategy, dev_rank, nproc, plan_file)
    link_groups(graph, ios, shards)

    transfers: list[list[Transfer]] = []
    sources: dict = {}
    for c, io in enumerate(ios):
        lst: list[Transfer] = []
        c_ranks = [r for r, n in enumerate(rrows[c]) if n > 0]
        for t, p in io.act_inputs:
            if c in shards or p in shards:
                sources[(c, t)] = [(src, grad) for _, src, grad in input_sources(c, t, p, rrows, shards)]
                lst += _placement_transfers(graph, t, p, input_sources(c, t, p, rrows, shards))
            elif graph.tensors[t].batch_axis is not None:
                lst += [Transfer(t, p, s.src, s.dst, s.start, s.rows) for s in slices(rrows[p], rrows[c])]
            else:
                p_ranks = [r for r, n in enumerate(rrows[p]) if n > 0]
                lst += [Transfer(t, p, p_ranks[0], dst, 0, 0) for dst in c_ranks if dst not in p_ranks]
        transfers.append(lst)

    sfb_ops, sfb_params = _sfb_ops(graph, groups, strategy, rrows, plan_file)
    users: dict[str, set[int]] = {}
    for g, io in enumerate(ios):
        for prm in io.params:
            users.setdefault(prm, set()).update(r for r, n in enumerate(rrows[g]) if n > 0)
    buckets = plan_buckets(graph, groups, strategy, plan_file)
    units = zero_units([io.params for io in ios], strategy.decisions, rrows, sfb_params, shards, buckets)
    scattered = {p for u in units if u.stage >= 1 for p in u.params}  # leave their buckets (reduce-scattered)
    blist = sync_buckets([io.params for io in ios], strategy, _without(buckets, shards), rrows, dev_rank,
                         sfb_params | scattered | {p for g, sg in shards.items() for p in ios[g].params
                                                   if p not in sg.tied}, plan_file)
    starts = None
    for g, sg in shards.items():
        blist += [SyncBucket(m, ranks, None, tuple(ps), (g,))
                  for m, ranks, ps in shard_syncs(sg, [p for p in ios[g].params if p not in scattered],
                                                  _shard_method(strategy.decisions[g]))]
        for prm in sg.once - sg.tied:
            users[prm] = set(sg.peers(0))
        starts = starts or [tuple(row_offsets(r)) for r in rrows]
        starts[g] = tuple(sg.replica_start[sg.where(r)[0]] if sg.where(r) else 0 for r in range(nproc))
    batch = sum(strategy.decisions[0].batch_rows) if strategy.decisions else 0
    return Schedule(nproc, batch, rank_machine, rrows,
                    ios, transfers, blist, sfb_ops, {p: tuple(sorted(u)) for p, u in users.items()},
                    zero_units=units, recompute_groups=frozenset(g for g, d in enumerate(strategy.decisions)
                                                                  if d.recompute),
                    shards=shards, row_starts=starts, sources=sources)


def _placement_transfers(graph: OpGraph, t: str, p: int, sources) -> list[Transfer]:
    """The transfers of input t (made by group p) to a consumer with a sharded end, per consumer position
    (`shard_plan.input_sources`): row ranges, or a whole unbatched tensor from the producer's first rank."""
    out = []
    for cons, src, grad in sources:
        if graph.tensors[t].batch_axis is not None:
            out += [Transfer(t, p, x.src, x.dst, x.start, x.rows, grad) for x in interval_slices(src, cons)]
        else:
            holders = sorted(r for r, _, _ in src)
            out += [Transfer(t, p, holders[0], d, 0, 0, grad) for d, _, _ in cons if d not in holders]
    return out


def _without(buckets, shards) -> tuple:
    """The plan's buckets without the sharded groups (their gradients sum by `shard_plan.shard_syncs`)."""
    out = []
    for b in buckets:
        gs = tuple(g for g in b.groups if g not in shards)
        if gs:
            out.append(dataclasses.replace(b, groups=gs))
    return tuple(out)


def _shard_method(dec) -> str:
    """The algorithm of a sharded group's sums: its decision's, or ring for auto, ps and none (a ps server need not
    sit among a position's peers)."""
    return dec.sync if dec.sync in ("ring", "tree", "hierarchical", "leader") else "ring"


def _sfb_ops(graph: OpGraph, groups: list[list[int]], strategy: Strategy, rrows: list[tuple[int, ...]],
             plan_file: str) -> tuple[list[SFBOp], set[str]]:
    names = graph.op_index()
    out, params = [], set()
    for g, dec in enumerate(strategy.decisions):
        for k, name in enumerate(dec.sfb):
            where = f"decisions[{g}].sfb[{k}]"
            i = names.get(name)
            if i is None or i not in groups[g]:
                raise InputError(plan_file, where, f"an op of group {g}", repr(name))
            op = graph.ops[i]
            form = sfb_form(graph, i, set(groups[g]))
            if form is None:
                raise InputError(plan_file, where, _sfb_refusal(graph, i, set(groups[g])), f"{op.op_type} {name!r}")
            weight = form.weight
            ranks = tuple(r for r, n in enumerate(rrows[g]) if n > 0)
            out.append(SFBOp(g, i, weight, ranks, form.side, form.trans, form.x_input))
            params.add(weight)
    return out, params


def _sfb_refusal(graph: OpGraph, i: int, group_ops: set[int]) -> str:
    """What an SFB entry must be, phrased for the op that is not (the `expected` of the InputError)."""
    op = graph.ops[i]
    if op.op_type not in SFB_OP_TYPES:
        return "a Gemm or MatMul with a 2-D parameter operand, or an embedding Gather"
    if op.op_type == "Gemm" and int(op.attrs.get("transA", 0)):
        return "a Gemm without transA"
    for name in op.inputs[:2]:
        t = graph.tensors.get(name)
        if t is None or t.role != "param":
            continue
        root = name if t.producer is None else (graph.ops[t.producer].inputs or [""])[0]
        if t.producer is not None and t.producer not in group_ops:
            return f"an op whose weight generator {graph.ops[t.producer].name!r} is in its group"
        others = [j for j, o in enumerate(graph.ops)
                  if j not in (i, t.producer) and root in (list(o.inputs) + list(o.params))]
        if others or op.inputs[0] == op.inputs[1]:
            return f"an op whose weight {root!r} no other op uses"
    if op.op_type == "Gather":
        return "a Gather on axis 0 of a 2-D parameter table with batched integer indices"
    return "a Gemm or MatMul whose operand is a batched activation and a 2-D parameter (or its Transpose)"

