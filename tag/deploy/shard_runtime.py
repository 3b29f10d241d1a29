"""A rank's part of its tensor-sharded groups (`tag.deploy.shard_plan`): weight slices, the ops, the exchanges.

Megatron-LM's operators over the ranks of one replica (a process group of their own, `Comm.shard_group`, so they
never interleave with the gradient sums of the sync thread):

* f, `copy_to_replica`: identity forward; backward, the gradient is all-reduced (sum) over the replica. Every full
  float activation a sharded op reads goes through f once per group run (a column half's input, a row half's input
  before it is narrowed to the position's features, a whole tensor broadcast into a split one): each position's
  gradient of it is the part its slice contributes, and their sum is the whole gradient;
* g, `reduce_from_replica`: forward, a row half's partial output is all-reduced; backward, identity;
* `gather_from_replica`: a split output is all-gathered along its split axis (pieces of uneven length padded to the
  longest, as gloo's all_gather needs equal sizes); backward, each position keeps its piece of the gradient.

16-bit tensors cross in fp32 (the sum rounds once, in 32 bits). Everything else of a sharded group runs through the
program as usual, op by op for the sharded ops: their inputs are substituted (f, narrowing, a zero bias for the row
half's Gemm at positions other than 0) and a Reshape whose target the split changes runs with the position's
target (`ReshapeRewrite`: length x the position's units / the pair's units; entries <= 0 stay).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _summed(x: torch.Tensor, group) -> torch.Tensor:
    """A new tensor: x summed over `group` (16-bit tensors summed in fp32)."""
    y = (x.detach().float() if x.dtype in (torch.float16, torch.bfloat16) else x.detach().clone()).contiguous()
    dist.all_reduce(y, group=group)
    return y.to(x.dtype)


class _CopyToReplica(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, dy):
        return _summed(dy.contiguous(), ctx.group), None


class _ReduceFromReplica(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return _summed(x.contiguous(), group)

    @staticmethod
    def backward(ctx, dy):
        return dy, None


class _DropGrad(torch.autograd.Function):
    """Identity forward; backward, no gradient to the input (what reads it still takes part in autograd, so every
    position applies the same f and g collectives)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, dy):
        return None


def gather_pieces(x: torch.Tensor, axis: int, pieces, order, index: int, group) -> torch.Tensor:
    """The whole tensor from every position's piece of `axis` (no autograd). pieces: (start, size) per position;
    order[q]: the position of the group's q-th rank (ranks ascending); index: this rank's position."""
    axis = axis % x.dim()
    longest = max(s for _, s in pieces)
    shape = list(x.shape)
    shape[axis] = longest
    buf = torch.zeros(shape, dtype=torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype,
                      device=x.device)
    buf.narrow(axis, 0, x.shape[axis]).copy_(x.detach())
    parts = [torch.empty_like(buf) for _ in order]
    dist.all_gather(parts, buf, group=group)
    by_pos = {order[q]: parts[q] for q in range(len(order))}
    return torch.cat([by_pos[j].narrow(axis, 0, pieces[j][1]) for j in range(len(pieces))], dim=axis).to(x.dtype)


class _GatherFromReplica(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, axis, pieces, order, index, group):
        ctx.axis, ctx.piece = axis % x.dim(), pieces[index]
        return gather_pieces(x, axis, pieces, order, index, group)

    @staticmethod
    def backward(ctx, dy):
        return dy.narrow(ctx.axis, *ctx.piece).contiguous(), None, None, None, None, None


class ShardRank:
    """Rank `rank`'s positions in the schedule's sharded groups. Slices the program's sharded parameters in place at
    construction (before the optimizer sees them)."""

    def __init__(self, schedule, graph, program, rank: int, comm):
        self.s, self.g, self.p, self.rank, self.comm = schedule, graph, program, rank, comm
        self.mine = {}  # group -> (ShardGroup, replica, position)
        for g, sg in schedule.shards.items():
            at = sg.where(rank)
            if at is not None:
                self.mine[g] = (sg, *at)
        self.slice_shapes: dict[str, tuple[int, ...]] = {}  # sliced parameter -> the shape this rank holds
        with torch.no_grad():
            for sg, _, j in self.mine.values():
                for name in sorted(set(sg.sliced) - sg.tied):  # a tied weight stays whole (`run`)
                    axis, start, size = sg.param_range(name, j)
                    prm = program.param(name)
                    prm.data = prm.data.narrow(axis, start, size).clone()
                    self.slice_shapes[name] = tuple(prm.shape)
        # inputs handed over split (the Megatron pair across two groups): already this position's slice
        self.split_inputs = {g: {t for t, p in schedule.groups[g].act_inputs
                                 if p in schedule.shards and t in schedule.shards[p].keep_split} for g in self.mine}

    # ---- where this rank stands ---------------------------------------------------------------------------------
    def position(self, g: int) -> int:
        """This rank's position in group g (0 for an unsharded group)."""
        return self.mine[g][2] if g in self.mine else 0

    def peers(self, g: int) -> tuple[int, ...] | None:
        """The ranks at this rank's position of group g in every replica (None for an unsharded group)."""
        return self.mine[g][0].peers(self.mine[g][2]) if g in self.mine else None

    def feature_slice(self, g: int):
        """For `TrainingContext.feature_slice`: tensor -> (axis, first index, whole length) of the features this
        rank's position of group g holds of a tensor the split leaves split inside the group; None if unsharded."""
        if g not in self.mine:
            return None
        sg, _, j = self.mine[g]

        def at(t: str):
            hit = sg.layout.split_tensors.get(t)
            if hit is None:
                return None
            axis, pair = hit
            whole = self._length(t, axis)
            return axis, sg.pieces(pair, whole)[j][0], whole

        return at

    def reports(self, g: int) -> bool:
        """Whether this rank counts group g's loss term (a sharded group's position 0 only)."""
        return self.position(g) == 0

    def _group(self, g: int):
        sg, r, _ = self.mine[g]
        return self.comm.shard_group(sg.replicas[r])

    def _order(self, g: int) -> list[int]:
        sg, r, _ = self.mine[g]
        rep = sg.replicas[r]
        return [rep.index(x) for x in sorted(rep)]

    # ---- forward ------------------------------------------------------------------------------------------------
    def run(self, g: int, op_ids, env: dict, rows: int, run_ops) -> dict:
        """Run group g's ops at this rank's position (module docstring); `run_ops` runs unsharded ops."""
        sg, _, j = self.mine[g]
        lay, group = sg.layout, self._group(g)
        narrow = {(i, k): p for i, k, p in lay.narrow_inputs}
        rewrites = {rw.op: rw for rw in lay.reshape_rewrites}
        reduced = set(lay.reduce_outputs)
        split = set(self.split_inputs[g])
        copies: dict[str, torch.Tensor] = {}

        def full(t: str) -> torch.Tensor:
            x = env[t]
            if not (torch.is_tensor(x) and x.is_floating_point() and x.requires_grad) or self._is_param(t):
                return x
            if t not in copies:
                copies[t] = _CopyToReplica.apply(x, group)
            return copies[t]

        env, seg = dict(env), []
        for t in sg.tied & set(env):  # whole on every rank: the position's slice as a view, or whole
            if t in sg.sliced:
                axis, start, size = sg.param_range(t, j)
                env[t] = env[t].narrow(axis, start, size)
            elif j > 0 and t in sg.whole_read:  # read by whole ops only: position 0's gradient counts
                env[t] = _DropGrad.apply(env[t])
        for i in op_ids:
            if i not in lay.sharded_ops:
                seg.append(i)
                continue
            if seg:
                env, seg = run_ops(seg, env, rows), []
            op = self.g.ops[i]
            over: dict[str, torch.Tensor] = {}
            for k, t in enumerate(op.inputs):
                if not t or t in over or t in split:
                    continue
                if t in sg.once and j > 0:
                    over[t] = torch.zeros_like(self.p.param(t))
                elif (i, k) in narrow:
                    x = full(t)
                    axis = 1 if op.op_type == "Conv" else x.dim() - 1
                    over[t] = x.narrow(axis, *sg.pieces(narrow[(i, k)], x.shape[axis])[j])
                elif t in env:
                    over[t] = full(t)
            if i in rewrites:
                res = {op.outputs[0]: self._reshape(i, rewrites[i], sg, j, env, over, rows)}
            else:
                res = run_ops([i], {**env, **over}, rows)
            for o in op.outputs:
                if not o:
                    continue
                env[o] = _ReduceFromReplica.apply(res[o], group) if o in reduced else res[o]
                if o not in reduced:
                    split.add(o)
        if seg:
            env = run_ops(seg, env, rows)
        for t, (axis, pair) in lay.split_outputs.items():
            if t in env and t not in sg.keep_split:
                x = env[t]
                env[t] = _GatherFromReplica.apply(x, axis, sg.pieces(pair, self._length(t, axis)), self._order(g),
                                                  j, group)
        return env

    def _is_param(self, t: str) -> bool:
        info = self.g.tensors.get(t)
        return info is not None and info.role == "param"

    def _length(self, t: str, axis: int) -> int:
        shape = self.g.tensors[t].shape
        return int(shape[axis % len(shape)])

    def _reshape(self, i: int, rw, sg, j: int, env: dict, over: dict, rows: int) -> torch.Tensor:
        """Reshape op i with the position's target (its entry rw.position rewritten when above 0)."""
        op = self.g.ops[i]
        x = over.get(op.inputs[0], env[op.inputs[0]])
        name = op.inputs[1]
        target = (env[name] if name in env else self.p.constant(name, rows)).clone()
        if int(target[rw.position]) > 0:
            u = sg.layout.units[rw.pair]
            target[rw.position] = rw.length * sg.units(rw.pair, j)[1] // u
        node = self.p.nodes[i]
        return node.fn(node, [x, target])

    # ---- backward -----------------------------------------------------------------------------------------------
    def broadcast_grads(self, g: int, outs: dict, grad_buf: dict) -> None:
        """Group g's outputs whose gradient came back to position 0 only: broadcast it over the replica."""
        if g not in self.mine:
            return
        sg, r, _ = self.mine[g]
        for t in sg.bcast_outputs:
            y = outs.get((g, t))
            if y is None or not y.is_floating_point():
                continue
            buf = grad_buf.get((g, t))
            if buf is None:
                buf = torch.zeros_like(y)
            wire = buf.float() if buf.dtype in (torch.float16, torch.bfloat16) else buf.contiguous()
            dist.broadcast(wire, src=sg.replicas[r][0], group=self._group(g))
            grad_buf[(g, t)] = wire.to(buf.dtype)

    # ---- the trained state: whole parameters in, whole parameters out -------------------------------------------
    def _sliced(self):
        """(group, ShardGroup, position, parameter) of every sliced parameter this rank holds, in one order."""
        for g in sorted(self.mine):
            sg, _, j = self.mine[g]
            for name in sorted(set(sg.sliced) - sg.tied):
                yield g, sg, j, name

    def whole_weights(self, weights: dict) -> dict:
        """`weights` with every sliced parameter gathered whole (a collective over each replica)."""
        out = dict(weights)
        for g, sg, j, name in self._sliced():
            if name in out:
                ps = sg.sliced[name]
                out[name] = gather_pieces(out[name], ps.axis, sg.pieces(ps.pair, ps.length), self._order(g), j,
                                          self._group(g))
        return out

    def whole_state(self, state: dict) -> dict:
        """Optimizer state by parameter with the sliced parameters' tensors gathered whole (a collective)."""
        out = dict(state)
        for g, sg, j, name in self._sliced():
            if name not in out:
                continue
            ps, local = sg.sliced[name], self.slice_shapes[name]  # (ZeRO 3 empties the program's parameter)
            out[name] = {key: gather_pieces(v, ps.axis, sg.pieces(ps.pair, ps.length), self._order(g), j,
                                            self._group(g))
                         if torch.is_tensor(v) and tuple(v.shape) == local else v for key, v in sorted(out[name].items())}
        return out

    def local(self, weights: dict, state: dict) -> tuple[dict, dict]:
        """Whole weights and optimizer states (a checkpoint) cut to this rank's slices."""
        weights, state = dict(weights), dict(state)
        for _, sg, j, name in self._sliced():
            axis, start, size = sg.param_range(name, j)
            whole = tuple(weights[name].shape) if name in weights else None
            if name in weights:
                weights[name] = weights[name].narrow(axis, start, size).clone()
            if name in state and whole is not None:
                state[name] = {key: v.narrow(axis, start, size).clone()
                               if torch.is_tensor(v) and tuple(v.shape) == whole else v
                               for key, v in state[name].items()}
        return weights, state
