"""What a deployed step does for each tensor-sharded group (issue 22), on ranks: pure data, no torch.

A sharded group (`Decision.shard`, `tag.strategy.shard`) runs on a grid of R replicas x k positions, one rank per grid
device. `tag.graph.shardable.analyse_group` says what each op does under the split; `ShardGroup` adds the ranks and
the whole units of each position (`shard_sizes` / `shard_offsets`, the one rounding):

* parameter `ParamSlice(name, axis, pair, length)` at position j: elements [o_j L / U, (o_j + s_j) L / U) of `axis`,
  U the pair's units, s_j / o_j the position's units and first unit (`param_range`);
* the Megatron f / g operators (`tag.deploy.shard_runtime`): every full float tensor a sharded op reads is the
  identity forward and all-reduced over the replica backward (f); a row half's partial output is all-reduced forward,
  identity backward (g). So every full tensor of the group holds, on every position, the whole value and the whole
  gradient;
* a split output a consumer needs whole is all-gathered (pieces of uneven length padded); it stays split when every
  consumer is a row half on the same grid, with the same shares and units, that narrows it to the same features
  (the Megatron pair across two groups: no exchange at all);
* weight gradients: sliced parameters and the unsliced ones only unsharded ops read (a LayerNorm scale) are summed
  over the position's peers (the device at that position in every replica); a row half's Gemm bias, added by
  position 0 only, lives and trains on position 0 only; an unsliced parameter a sharded op reads (its gradient a
  partial sum per position) is summed over every rank of the grid;
* tied weights (`tied`: a parameter another group uses too, GPT-2's token embedding and LM head): every rank holds
  it whole; a sliced one is read through a view of the position's slice (its gradient: the slice's, zero elsewhere),
  an unsliced one only whole ops read contributes its gradient at position 0 only (the others' is the same), so the
  sum over the ranks of all its groups, the tied parameters' own sync (`bucket_plan.sync_buckets`), is the whole
  gradient. Such a parameter is held whole and is in no ZeRO unit.
* training-mode BatchNormalization and Dropout: batch statistics are summed over the position's peers (the same
  features of the other replicas' rows; `RankRuntime._training_context`), dropout masks are the whole batch's cut to
  the replica's rows and the position's features (`ShardRank.feature_slice`).

Between groups (`input_sources`): position j of a consumer takes a full input from the producer's position j when
both are sharded on the same grid (no transfer; each position returns its own gradient), else from the producer's
row layout (position 0 for a sharded producer), and only the consumer's position 0 returns the gradient (the others
hold the same whole gradient); a sharded producer then broadcasts such outputs' gradients from position 0 over its
replica before its backward (`ShardGroup.bcast_outputs`).

In a pipelined plan the shards are those of the micro-batch strategy (`pipeline_schedule.micro_strategy`: every row
count / m), so a stage's sharded groups run per micro-batch as they run whole-batch; ZeRO on a sharded group shards
each position's parameters over its peers (`zero_plan.zero_units`).

Refused, each an `InputError` naming the plan's JSON path (exit 2 in tag deploy): SFB on a sharded group (plan check
refuses it too), a split the group's ops do not allow, heads not split exactly, a position with no unit, and an
--nproc that puts two devices of one grid on one rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tag.errors import InputError
from tag.graph.shardable import NotShardable, ParamSlice, ShardLayout, analyse_group
from tag.strategy import row_offsets
from tag.strategy.placement import Placement, rows_placement
from tag.strategy.shard import batch_rows, exact_units, shard_offsets, shard_sizes



@dataclass
class ShardGroup:
    """Group `group` sharded by `layout` over `replicas` (rank tuples in position order) with shares `ratios`."""

    group: int
    layout: ShardLayout
    replicas: tuple[tuple[int, ...], ...]
    ratios: tuple[float, ...]
    replica_rows: tuple[int, ...]  # rows of each replica
    replica_start: tuple[int, ...]  # first global row of each replica
    sliced: dict[str, ParamSlice] = field(default_factory=dict)
    once: frozenset = frozenset()  # row halves' Gemm biases: held and trained by position 0 only
    partial: frozenset = frozenset()  # unsliced parameters read by sharded ops: summed over every grid rank
    ops: tuple[int, ...] = ()  # the group's op indices
    keep_split: frozenset = frozenset()  # split outputs handed on as slices (Megatron pair across groups)
    bcast_outputs: tuple[str, ...] = ()  # full outputs whose gradient comes back to position 0 only
    tied: frozenset = frozenset()  # parameters other groups use too: held whole, summed over every user's ranks
    whole_read: frozenset = frozenset()  # parameters only the group's unsplit ops read

    @property
    def k(self) -> int:
        return len(self.ratios)

    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(r for rep in self.replicas for r in rep))

    def where(self, rank: int) -> tuple[int, int] | None:
        """(replica, position) of `rank`, or None when the rank is not on the grid."""
        for r, rep in enumerate(self.replicas):
            if rank in rep:
                return r, rep.index(rank)
        return None

    def peers(self, j: int) -> tuple[int, ...]:
        return tuple(sorted(rep[j] for rep in self.replicas))

    def units(self, pair: int, j: int) -> tuple[int, int]:
        """(first unit, units) of pair `pair` at position j."""
        u = self.layout.units[pair]
        return shard_offsets(u, self.ratios)[j], shard_sizes(u, self.ratios)[j]

    def pieces(self, pair: int, length: int) -> tuple[tuple[int, int], ...]:
        """(start, size) in elements of every position's piece of an axis of `length` elements split by `pair`."""
        u = self.layout.units[pair]
        width = length // u
        return tuple((o * width, s * width) for o, s in zip(shard_offsets(u, self.ratios), shard_sizes(u, self.ratios)))

    def param_range(self, name: str, j: int) -> tuple[int, int, int]:
        """(axis, first element, elements) of sliced parameter `name` held at position j."""
        ps = self.sliced[name]
        start, size = self.pieces(ps.pair, ps.length)[j]
        return ps.axis, start, size

    def placement(self, j: int) -> Placement:
        """Where the group's full tensors' rows are at position j: each replica's rows on its position-j rank."""
        return tuple(sorted((rep[j], s, n) for rep, s, n in zip(self.replicas, self.replica_start, self.replica_rows)))


def shard_groups(graph, groups: list[list[int]], strategy, dev_rank: list[int], nproc: int,
                 plan_file: str) -> dict[int, ShardGroup]:
    """The `ShardGroup` of every sharded decision, checked (module docstring; InputError naming the JSON path)."""
    out: dict[int, ShardGroup] = {}
    users: dict[str, set[int]] = {}
    for g, ops in enumerate(groups):
        for i in ops:
            for t in list(graph.ops[i].inputs) + list(graph.ops[i].params):
                info = graph.tensors.get(t)
                if info is not None and info.role == "param":
                    users.setdefault(t, set()).add(g)
    for g, dec in enumerate(strategy.decisions):
        sh = dec.shard
        if sh is None:
            continue
        where = f"decisions[{g}]"
        if dec.sfb:
            raise InputError(plan_file, f"{where}.sfb", "no SFB op in a sharded group", repr(list(dec.sfb)))
        ranks = [tuple(dev_rank[d] for d in rep) for rep in sh.replicas]
        if len({r for rep in ranks for r in rep}) != sum(len(rep) for rep in ranks):
            raise InputError("--nproc", str(nproc), f"a rank count that gives each device of {plan_file} {where}."
                             "shard its own rank", "two of its devices on one rank")
        ops = groups[g]
        try:
            lay = analyse_group(graph, ops, sh.split)
        except NotShardable as e:
            raise InputError(plan_file, f"{where}.shard.split", "a split the group's ops allow", str(e)) from None
        for p, u in enumerate(lay.units):
            if lay.exact[p] and not exact_units(u, sh.ratios):
                raise InputError(plan_file, f"{where}.shard.ratios", f"shares that split the {u} heads exactly",
                                 repr(list(sh.ratios)))
            if min(shard_sizes(u, sh.ratios)) < 1:
                raise InputError(plan_file, f"{where}.shard.ratios", f"shares that give every position at least "
                                 f"one of the {u} units", repr(list(sh.ratios)))
        params = {t for i in ops for t in list(graph.ops[i].inputs) + list(graph.ops[i].params)
                  if graph.tensors.get(t) is not None and graph.tensors[t].role == "param"}
        tied = frozenset(t for t in params if users.get(t, set()) != {g})
        sliced = {ps.name: ps for ps in lay.params}
        by_sharded = _read_by(graph, ops, params, lambda i: i in lay.sharded_ops)
        by_whole = _read_by(graph, ops, params, lambda i: i not in lay.sharded_ops)
        once = set(lay.bias_once)
        clash = sorted((once & by_whole) | (set(sliced) & by_whole) | ((by_sharded - set(sliced) - once) & by_whole))
        if clash:
            raise InputError(plan_file, f"{where}.shard", "parameters read either by the split ops or by the whole "
                             "ones", repr(clash[0]))
        brows = batch_rows(dec.rows, sh)
        starts = row_offsets(brows)
        out[g] = ShardGroup(g, lay, tuple(ranks), tuple(sh.ratios), tuple(dec.rows[rep[0]] for rep in sh.replicas),
                            tuple(starts[rep[0]] for rep in sh.replicas), sliced, frozenset(once),
                            frozenset(by_sharded - set(sliced) - once), tuple(ops), tied=tied,
                            whole_read=frozenset(by_whole - by_sharded))
    return out


def _read_by(graph, ops, params: set, chosen) -> set:
    """The parameters the ops `chosen(i)` of a group read, directly or through weight generators (a Transpose of a
    sliced weight runs on the slice, so a generator is neither a split op nor a whole one)."""
    gen = {i for i in ops if graph.ops[i].is_weight_generator}
    out = {t for i in ops if i not in gen and chosen(i) for t in graph.ops[i].inputs if t in params}
    for i in reversed(ops):
        if i in gen and out & set(graph.ops[i].outputs):
            out |= {t for t in graph.ops[i].inputs if t in params}
    return out


def same_grid(a: ShardGroup | None, b: ShardGroup | None) -> bool:
    return a is not None and b is not None and a.replicas == b.replicas and a.replica_rows == b.replica_rows


def link_groups(graph, ios, shards: dict[int, ShardGroup]) -> None:
    """Set `keep_split` and `bcast_outputs` of every sharded group from its consumers (module docstring)."""
    readers: dict[str, list[int]] = {}
    for io in ios:
        for t, _ in io.act_inputs:
            readers.setdefault(t, []).append(io.id)
    for g, sg in shards.items():
        keep, bcast = set(), []
        for t in ios[g].outputs:
            cons = readers.get(t, [])
            if t in sg.layout.split_outputs:
                if t not in graph.outputs and cons and all(_pair_reader(graph, sg, shards.get(c), t) for c in cons):
                    keep.add(t)
            if t not in keep and any(not same_grid(sg, shards.get(c)) for c in cons):
                bcast.append(t)
        sg.keep_split, sg.bcast_outputs = frozenset(keep), tuple(bcast)


def _pair_reader(graph, sg: ShardGroup, cg: ShardGroup | None, t: str) -> bool:
    """Whether group `cg` reads split output t of `sg` only by narrowing it to exactly the slice sg's position holds."""
    if not same_grid(sg, cg) or cg.ratios != sg.ratios:
        return False
    ax, pair = sg.layout.split_outputs[t]
    uses = [(i, k) for i in cg.ops for k, x in enumerate(graph.ops[i].inputs) if x == t]
    narrowed = {(i, k): p for i, k, p in cg.layout.narrow_inputs}
    if not uses or any(u not in narrowed for u in uses):
        return False
    rank = len(graph.tensors[t].shape)
    for i, k in uses:
        feat = 1 if graph.ops[i].op_type == "Conv" else rank - 1
        if ax % rank != feat or cg.layout.units[narrowed[(i, k)]] != sg.layout.units[pair]:
            return False
    return True


def input_sources(c: int, t: str, p: int, rank_rows: list[tuple[int, ...]], shards: dict[int, ShardGroup]
                  ) -> list[tuple[Placement, Placement, bool]]:
    """Per position of consumer group c: (consumer placement, producer placement it takes input t from, whether that
    position returns t's gradient) (module docstring)."""
    cg, pg = shards.get(c), shards.get(p)
    cons = [cg.placement(j) for j in range(cg.k)] if cg is not None else [rows_placement(rank_rows[c])]
    out = []
    for j, cp in enumerate(cons):
        if same_grid(cg, pg):
            out.append((cp, pg.placement(j % pg.k), True))
        else:
            out.append((cp, pg.placement(0) if pg is not None else rows_placement(rank_rows[p]), j == 0))
    return out


def shard_syncs(sg: ShardGroup, params: list[str], method: str) -> list[tuple[str, tuple[int, ...], list[str]]]:
    """(method, ranks, parameters) of group sg's gradient sums (module docstring), over two ranks or more."""
    out, params = [], [n for n in params if n not in sg.tied]
    for j in range(sg.k):
        own = [n for n in params if n not in sg.partial and (n not in sg.once or j == 0)]
        out.append((method, sg.peers(j), own))
    out.append((method, sg.ranks(), [n for n in params if n in sg.partial]))
    return [x for x in out if len(x[1]) > 1 and x[2]]
