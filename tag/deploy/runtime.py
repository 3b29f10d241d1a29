"""One rank's training step of a plan: forward and backward group by group, slices between ranks, gradient sync.

The program is anything with ``run_ops(op_ids, env, rows) -> env`` (runs OpGraph ops by index on a dict of
named tensors, `rows` being the batch rows of this call), ``param(name)`` and ``param_names``, like
`tag.deploy.onnx_torch.TorchProgram`.

Forward: groups in topological order. Before group g every rank posts the sends and receives of g's
input slices (`Schedule.transfers[g]`); the rank then assembles each input for its rows from its own
piece and the received slices, detaches it into a leaf, and runs g's ops. Backward is the mirror, groups
in reverse order: the rank back-propagates g from its loss term and the output gradients its consumers
returned, then sends each input leaf's gradient slice back to the rank it came from (the autograd-aware
half of every transfer). Because all ranks walk the same group order, no exchange can deadlock. A slice that
several groups of a rank read crosses once (`tag.deploy.pipeline_schedule.transfer_aliases`), at the exchange of the
lowest of them; the others read that buffer, and backward add their gradients of it into the lowest one's message.

Gradients sync by the plan's buckets (`Schedule.buckets`, `tag.deploy.bucket_plan`), overlapped with the backward
as DDP does: a bucket's sum starts (`Comm.start_sum`) as soon as the backward of every group using its parameters
has run on this rank, i.e. after group min{g : g uses one of them} (backwards run g = K-1 .. 0), and never before
the buckets listed ahead of it, so every rank starts the plan's buckets (reverse backward order), then the tied
parameters' own syncs, in one order. After the backward the rank starts any left, waits for all of them, then runs
the SFB all-gathers and the optimizer step. The gradients of a bucket's parameters accumulate straight into slices
of one flat buffer, which the bucket's algorithm sums in place (`_bucket_views`). A communicator without
``start_sum`` sums each bucket at once when it starts.

Loss (`tag.deploy.loss`): by default the sum over float graph outputs of sum((y - target)^2) / numel(target
over the global batch); with user data the chosen loss of the first output. Each rank's term is its rows'
share and the replicas' gradients add up to the full-batch gradient: every sync method sums. SFB ops (`SFBOp`) keep X and dY, all-gather both over the group's replicas and form
dW = X_all^T dY_all on every replica instead of all-reducing dW.

Memory and precision decisions (docs/deploy.md): a group's ops run in the plan's precision (`tag.deploy.precision`:
autocast, 16-bit activations between ranks), checkpointed when it recomputes (`tag.deploy.recompute`), on weights
gathered from ZeRO 3 shards (`tag.deploy.zero`); the sums, the update and the trained state are `runtime_sync`'s.
"""

from __future__ import annotations

import torch

from tag.deploy.comm import Comm
from tag.deploy.pipeline_schedule import transfer_aliases
from tag.deploy.precision import Precision
from tag.deploy.recompute import run_recomputed
from tag.deploy.schedule import Schedule, SFBOp
from tag.deploy.shard_runtime import ShardRank
from tag.deploy.sfb import sfb_forward
from tag.graph.op_families import is_training_batchnorm
from tag.graph.opgraph import OpGraph
from tag.deploy.data import torch_dtype
from tag.deploy.loss import MSE, Loss
from tag.deploy.onnx_torch.ops_nn import TrainingContext, training_context
from tag.deploy.row_slices import entries_per_row, narrow_rows
from tag.deploy.zero import ZeroShards
from tag.deploy.runtime_sync import GradSync


class RankRuntime(GradSync):
    """The training step of rank `rank`. `data`/`targets` hold the full global batch (sliced per group)."""

    def __init__(self, schedule: Schedule, graph: OpGraph, program, rank: int, comm: Comm,
                 data: dict[str, torch.Tensor], targets: dict[str, torch.Tensor], optimizer_factory, loss: Loss = MSE,
                 precision: Precision = Precision()):
        self.s, self.g, self.p, self.rank, self.comm = schedule, graph, program, rank, comm
        self.precision = precision
        precision.apply_backend_flags()
        self.data, self.targets = data, targets
        # user data (tag.deploy.train): data/targets hold global rows [row_base, ...) only; `correct` counts the
        # step's rows classified right (classification losses; Loss.correct: fractions with positions)
        self.loss, self.row_base, self.correct = loss, 0, 0.0
        self.counted = None  # the step's global count of labels that are not ignored, when some are (loss.py)
        # training-mode ops (BatchNormalization, Dropout): mask seed and step, set by the step loop
        self.seed, self.step_index = 0, 0
        self.shard = ShardRank(schedule, graph, program, rank, comm)  # slices sharded weights: before the optimizer
        self.my_params = [n for n, users in schedule.param_users.items() if rank in users]
        # ZeRO units (tag.deploy.zero): the optimizer updates their master shards instead of their parameters
        self.zero = ZeroShards(schedule.zero_units, program, rank, comm)
        self.opt_params = [n for n in self.my_params if n not in self.zero.params]
        trained = [program.param(n) for n in self.opt_params] + self.zero.masters()
        self.optimizer = optimizer_factory(trained) if trained else None
        self.scaler = precision.loss_scaler(lambda bad: comm.sum_scalar(float(bad), "max") > 0)
        self.sfb_by_op = {op.op_id: op for op in schedule.sfb}
        # a tensor crosses to a rank once (`tag.deploy.pipeline_schedule.transfer_aliases`)
        self.aliases = transfer_aliases(schedule.transfers, frozenset(schedule.sources))
        self._inbox: dict = {}  # (group, transfer) -> received buffer its aliases read (pipelines: keyed by micro-batch)
        self._grad_acc: dict = {}  # the same keys -> the gradient its aliases have added for it
        self.grad_buckets = [(b, *self._bucket_views(b)) for b in schedule.buckets if rank in b.ranks]
        self.sync_items = self._sync_items()
        self._started: list = []  # this step's started sums: (handle, copy-back or None), in sync_items order
        # Bucket sums overlap the backward unless a split training-mode BatchNormalization all-reduces its statistics'
        # gradients during the backward: those collectives run on this thread, the started sums on the sync thread,
        # and two threads' collectives on one process group would reach the ranks in different orders.
        self.overlap_syncs = not any(len(schedule.ranks_of(io.id)) > 1 and any(
            is_training_batchnorm(graph.ops[i]) for i in io.op_ids) for io in schedule.groups)

    # ---- helpers -------------------------------------------------------------------------------
    def _rows(self, g: int, r: int | None = None) -> tuple[int, int]:
        r = self.rank if r is None else r
        return self.s.rank_offset(g, r), self.s.rank_rows[g][r]

    def _axis(self, t: str) -> int | None:
        return self.g.tensors[t].batch_axis

    def _narrow(self, x: torch.Tensor, t: str, first_row: int, rows: int) -> torch.Tensor:
        """Rows [first_row, first_row + rows) of `x` (a value of tensor t), flattened batch axes included."""
        return narrow_rows(x, self.g.tensors[t], self.g.file_batch, first_row, rows)

    def _shape(self, t: str, rows: int | None) -> tuple[int, ...]:
        info = self.g.tensors[t]
        if info.shape is None:
            raise RuntimeError(f"shape of tensor {t!r} unknown; cannot receive it")
        shape = list(info.shape)
        if info.batch_axis is not None and rows is not None:
            shape[info.batch_axis] = shape[info.batch_axis] // max(self.g.file_batch, 1) * rows
        return tuple(shape)

    def _wire_dtype(self, t: str) -> torch.dtype:
        """The dtype tensor t crosses ranks in (16 bits for float tensors under mixed precision)."""
        return self.precision.wire_dtype(torch_dtype(self.g.tensors[t].dtype))

    def _is_float(self, t: str) -> bool:
        return torch_dtype(self.g.tensors[t].dtype).is_floating_point

    def _alias_of(self, consumer: int, k: int) -> tuple[int, int] | None:
        """The (lower group, transfer) whose message transfer k into `consumer` reads instead of its own, or None."""
        return self.aliases[consumer][k]

    def _grad_to_send(self, key: tuple, alias: tuple | None, dx: torch.Tensor) -> torch.Tensor | None:
        """The gradient message of a received slice: None for an alias (`dx` is added into its message's, keyed
        like `key` with the alias's (group, transfer) last), else `dx` plus what its aliases added."""
        if alias is not None:
            k = (*key[:-2], *alias)
            self._grad_acc[k] = dx if k not in self._grad_acc else self._grad_acc[k] + dx
            return None
        more = self._grad_acc.pop(key, None)
        return dx if more is None else dx + more

    # ---- forward -------------------------------------------------------------------------------
    def _forward_group(self, g: int) -> None:
        self._forward_compute(g, self._forward_exchange(g))

    def _forward_exchange(self, g: int) -> dict[str, list[tuple[int, torch.Tensor]]]:
        """Send and receive group g's input slices; returns tensor -> [(global start row, received piece)]."""
        sends, recvs, got = [], [], {}
        for k, tr in enumerate(self.s.transfers[g]):
            alias = self._alias_of(g, k)
            if alias is not None:  # received (and sent) at the lower group's exchange
                if tr.dst == self.rank:
                    got.setdefault(tr.tensor, []).append((tr.start, self._inbox[alias]))
                continue
            if tr.src == self.rank:
                x = self.outs[(tr.producer_group, tr.tensor)]
                if not tr.whole:
                    off, _ = self._rows(tr.producer_group)
                    x = self._narrow(x, tr.tensor, tr.start - off, tr.rows)
                sends.append((tr.dst, x.detach().to(self.precision.wire_dtype(x.dtype)), k))
            if tr.dst == self.rank:
                buf = torch.empty(self._shape(tr.tensor, None if tr.whole else tr.rows),
                                  dtype=self._wire_dtype(tr.tensor), device=self.device)
                recvs.append((tr.src, buf, k))
                got.setdefault(tr.tensor, []).append((tr.start, buf))
                self._inbox[(g, k)] = buf
        if sends or recvs:
            self.comm.exchange(sends, recvs)
        return got

    def _forward_compute(self, g: int, got: dict[str, list[tuple[int, torch.Tensor]]]) -> None:
        """Assemble group g's inputs for this rank's rows from its own pieces and `got`, run its ops, add its loss."""
        io = self.s.groups[g]
        off, n = self._rows(g)
        if n == 0:
            return
        env: dict[str, torch.Tensor] = {}
        for t, p in io.act_inputs:
            pieces = list(got.get(t, []))
            if self._holds(g, t, p):
                mine = self.outs[(p, t)]
                ax = self._axis(t)
                if ax is None:
                    pieces = [(0, mine)]
                else:
                    p_off, p_n = self._rows(p)
                    lo, hi = max(off, p_off), min(off + n, p_off + p_n)
                    if hi > lo:
                        pieces.append((lo, self._narrow(mine, t, lo - p_off, hi - lo)))
            pieces.sort(key=lambda q: q[0])
            x = pieces[0][1] if len(pieces) == 1 else torch.cat([q[1] for q in pieces], dim=self._axis(t))
            x = x.detach()
            if x.is_floating_point():
                x = x.to(self.precision.wire_dtype(x.dtype)).requires_grad_(True)
            self.leaves[(g, t)] = x
            env[t] = x
        for t in io.data_inputs:
            env[t] = self.data[t].narrow(self._axis(t) or 0, off - self.row_base, n)
        for t in io.params:
            env[t] = self.p.param(t)
        env.update(self.zero.weights_for(g))
        if io.recompute:
            env = self._recompute_shapes(io.recompute, env, n)
        env = self._compute(g, env, n, off)
        self.zero.release(g, env, io.outputs)
        loss = None
        for t in io.outputs:
            self.outs[(g, t)] = env[t]
            if t in self.targets:
                ax = self._axis(t)
                if ax is None and self.rank != self.s.ranks_of(g)[0]:
                    continue
                target = self.targets[t] if ax is None else self.targets[t].narrow(ax, off - self.row_base, n)
                y = env[t].float() if self.precision.mixed and env[t].is_floating_point() else env[t]
                if self.loss.name in ("mse", "bce") and tuple(y.shape) != tuple(target.shape):
                    raise RuntimeError(f"output {t!r} has shape {tuple(y.shape)} on {n} rows, expected "
                                       f"{tuple(target.shape)} from the model's shapes and batch axis")
                term = self.loss.term(y, target, self.s.batch_size, None if ax is None else n, self.counted)
                if self.shard.reports(g):  # every position of a sharded group back-propagates the loss
                    self.correct += self.loss.correct(y, target, self.counted, self.s.batch_size)
                loss = term if loss is None else loss + term
        if loss is not None:
            self.losses[g] = loss

    def _compute(self, g: int, env: dict, rows: int, off: int) -> dict:
        """Run group g's ops on `env` in its training context and the plan's precision, checkpointed if the group
        recomputes (the context and autocast are entered inside the run, which repeats during the backward)."""
        ctx = self._training_context(g, off)

        def run(e: dict) -> dict:
            with training_context(ctx), self.precision.autocast():
                if g in self.shard.mine:
                    return self.shard.run(g, self.s.groups[g].op_ids, e, rows, self.p.run_ops)
                return self._run_ops(self.s.groups[g].op_ids, e, rows)

        return run_recomputed(run, env, self.s.groups[g].outputs) if g in self.s.recompute_groups else run(env)

    def _training_context(self, g: int, off: int) -> TrainingContext:
        """Group g's rows in the global batch, and the sum over its replicas for batch statistics (of a sharded
        group: over the ranks at this rank's position, which hold the same features of the other replicas' rows)."""
        ranks = self.shard.peers(g) or self.s.ranks_of(g)
        stats_sum = None
        if len(ranks) > 1:
            from tag.deploy.batch_stats import group_sum

            stats_sum = lambda t: group_sum(self.comm.group(ranks))(t)  # noqa: E731 - the group only when used
        return TrainingContext(seed=self.seed, step=self.step_index, row_offset=off, global_rows=self.s.batch_size,
                               stats_sum=stats_sum, batch_axis=self._axis, feature_slice=self.shard.feature_slice(g))

    def _holds(self, g: int, t: str, p: int, backward: bool = False) -> bool:
        """Whether this rank's own output t of group p feeds group g here (in the backward: and takes t's gradient
        back): it holds rows of p, or with a sharded end, it is in the producer placement of its position of g
        (`Schedule.sources`) and, backward, that position returns gradients."""
        src = self.s.sources.get((g, t))
        if src is None:
            return self.s.rank_rows[p][self.rank] > 0
        placement, grad = src[self.shard.position(g)]
        return any(r == self.rank for r, _, _ in placement) and (grad or not backward)

    def _recompute_shapes(self, op_ids: list[int], env: dict, rows: int) -> dict:
        """Re-run shape subgraphs for this rank's rows: Shape ops from static shapes, the rest by the program."""
        for i in op_ids:
            op = self.g.ops[i]
            if op.op_type == "Shape" and op.inputs[0] not in env:  # else its live value (rows of this call)
                dims = torch.tensor(self._shape(op.inputs[0], rows), dtype=torch.int64, device=self.device)
                start, end = op.attrs.get("start", 0), op.attrs.get("end", None)
                env[op.outputs[0]] = dims[start:end]
            else:
                env = self.p.run_ops([i], env, rows)
        return env

    def _run_ops(self, op_ids: list[int], env: dict, rows: int) -> dict:
        seg: list[int] = []
        for i in op_ids:
            if i in self.sfb_by_op:
                if seg:
                    env = self.p.run_ops(seg, env, rows)
                    seg = []
                env = sfb_forward(self.g.ops[i], env, self.p, self.sfb_store.setdefault(i, []), self.sfb_by_op[i])
            else:
                seg.append(i)
        if seg:
            env = self.p.run_ops(seg, env, rows)
        return env

    # ---- backward ------------------------------------------------------------------------------
    def _backward_group(self, g: int) -> None:
        self._backward_compute(g)
        if self.overlap_syncs:
            self._start_ready_buckets(g)
        self._backward_exchange(g)
        self._release(g)

    def _release(self, g: int) -> None:
        """Drop group g's outputs, input leaves (and their gradients) and loss term once its backward is done: nothing
        reads them again this step, and a framework frees them here too (`tag.sim.memory`)."""
        for d in (self.outs, self.leaves):
            for key in [k for k in d if k[0] == g]:
                del d[key]
        self.losses.pop(g, None)

    def _backward_compute(self, g: int) -> None:
        """Back-propagate group g from its loss term and output gradients; hand input gradients to own producers."""
        io = self.s.groups[g]
        off, n = self._rows(g)
        if n > 0:
            roots, grads = [], []
            self.shard.broadcast_grads(g, self.outs, self.grad_buf)
            if g in self.losses and self.losses[g].requires_grad:
                roots.append(self.losses[g])
                grads.append(torch.full_like(self.losses[g], self.scaler.scale if self.scaler else 1.0))
            for t in io.outputs:
                gb = self.grad_buf.pop((g, t), None)
                y = self.outs[(g, t)]
                if gb is not None and y.requires_grad:
                    roots.append(y)
                    grads.append(gb)
            self.zero.before_backward(g)
            if roots:
                torch.autograd.backward(roots, grads)
            self.zero.release(g)
            for t, p in io.act_inputs:
                if not self._is_float(t) or not self._holds(g, t, p, backward=True):
                    continue
                dx = self._leaf_grad(g, t)
                ax = self._axis(t)
                if ax is None:
                    self._add_grad(p, t, None, dx)
                    continue
                p_off, p_n = self._rows(p)
                lo, hi = max(off, p_off), min(off + n, p_off + p_n)
                if hi > lo:
                    self._add_grad(p, t, lo, self._narrow(dx, t, lo - off, hi - lo))

    def _backward_exchange(self, g: int) -> None:
        """Send group g's input gradient slices back to their producers; add the ones received to own outputs."""
        off, _ = self._rows(g)
        sends, recvs, got = [], [], []
        for k, tr in enumerate(self.s.transfers[g]):
            alias = self._alias_of(g, k)
            if alias is None:
                self._inbox.pop((g, k), None)
            if not self._is_float(tr.tensor) or not tr.grad:
                continue
            if tr.dst == self.rank:
                dx = self._leaf_grad(g, tr.tensor)
                if not tr.whole:
                    dx = self._narrow(dx, tr.tensor, tr.start - off, tr.rows)
                dx = self._grad_to_send((g, k), alias, dx)
                if dx is not None:
                    sends.append((tr.src, dx.to(self.precision.wire_dtype(dx.dtype)), k))
            if tr.src == self.rank and alias is None:
                buf = torch.empty(self._shape(tr.tensor, None if tr.whole else tr.rows),
                                  dtype=self._wire_dtype(tr.tensor), device=self.device)
                recvs.append((tr.dst, buf, k))
                got.append((tr, buf))
        if sends or recvs:
            self.comm.exchange(sends, recvs)
        for tr, buf in got:
            self._add_grad(tr.producer_group, tr.tensor, None if tr.whole else tr.start, buf, owned=True)

    def _leaf_grad(self, g: int, t: str) -> torch.Tensor:
        x = self.leaves[(g, t)]
        return x.grad if x.grad is not None else torch.zeros_like(x)

    def _add_grad(self, p: int, t: str, start: int | None, dx: torch.Tensor, owned: bool = False) -> None:
        """Add `dx` (rows from global row `start`, or the whole tensor) into the output gradient of (p, t).

        `owned`: dx is a buffer nothing else reads or writes (a received message); when it is the first gradient of
        (p, t) and covers all of it, it becomes the gradient buffer itself instead of being added into zeros."""
        y = self.outs[(p, t)]
        buf = self.grad_buf.get((p, t))
        if buf is None and owned and dx.dtype == y.dtype and dx.shape == y.shape and (
                start is None or start == self._rows(p)[0]):
            self.grad_buf[(p, t)] = dx
            return
        if buf is None:
            buf = self.grad_buf[(p, t)] = torch.zeros_like(y, dtype=y.dtype)
        if start is None:
            buf += dx
        else:
            p_off, _ = self._rows(p)
            k = entries_per_row(self.g.tensors[t], self.g.file_batch)
            self._narrow(buf, t, start - p_off, dx.shape[self._axis(t)] // k).add_(dx)

    @property
    def device(self) -> torch.device:
        return next(iter(self.data.values())).device if self.data else torch.device("cpu")

    def step(self) -> float:
        """One training step (forward, backward, sync, optimizer update); returns this rank's loss term."""
        self.outs, self.leaves, self.losses, self.grad_buf, self.sfb_store = {}, {}, {}, {}, {}
        self._inbox, self._grad_acc = {}, {}
        self._zero_grads()
        for g in range(len(self.s.groups)):
            self._forward_group(g)
        local = float(sum(float(v.detach()) for g, v in self.losses.items() if self.shard.reports(g)))
        for g in reversed(range(len(self.s.groups))):
            self._backward_group(g)
        self._sync_and_update()
        self.outs = self.leaves = self.losses = self.grad_buf = self.sfb_store = {}
        return local
