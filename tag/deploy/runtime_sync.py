"""The gradient sums, the optimizer update and the trained state of a rank's step (a mixin of `RankRuntime`).

Gradients sync by the plan's buckets, overlapped with the backward (see `tag.deploy.runtime`), and the ZeRO units of
stages 1-3 by one reduce-scatter call per plan bucket (`tag.deploy.zero`, `zero_plan.scatter_batches`), all in one
order on every rank (`zero_plan.sync_order`).
After the sums: the optimizer step (through the fp16 loss scaler), the ZeRO 1-2 all-gathers.
`trained_weights`, `optimizer_state` and `load_state` give and take the full per-parameter values checkpoints hold.
"""

from __future__ import annotations

import torch

from tag.deploy.sfb import sfb_weight_grad
from tag.deploy.zero_plan import scatter_batches, sync_order


class GradSync:
    """Sync, update and state methods over the attributes `RankRuntime.__init__` sets."""

    def _sync_items(self) -> list[tuple[int, str, object]]:
        """This rank's gradient collectives in the one order of all ranks (`zero_plan.sync_order`): (the group after
        whose backward it is complete, "bucket", (bucket, flat, views)) or (that group, "unit", the groups of one
        reduce-scatter call whose units this rank is in)."""
        groups = self.s.groups
        ready = [min(g for g, io in enumerate(groups) if set(io.params) & set(b.params)) for b in self.s.buckets]
        units = self.s.zero_units
        calls = scatter_batches(units)
        mine = {id(b): item for item in self.grad_buckets for b in item[:1]}
        out = []
        for kind, i in sync_order(ready, [min(units[j].group for j in js) for js in calls]):
            if kind == "bucket" and id(self.s.buckets[i]) in mine:
                out.append((ready[i], kind, mine[id(self.s.buckets[i])]))
            elif kind == "unit":
                gs = tuple(units[j].group for j in calls[i] if self.rank in units[j].ranks)
                if gs:
                    out.append((min(units[j].group for j in calls[i]), kind, gs))
        return out

    # ---- sync and step -------------------------------------------------------------------------------
    def _start_ready_buckets(self, done: int) -> None:
        """Start, in `sync_items` order, the bucket sums and ZeRO reduce-scatters complete once groups done..K-1 ran
        their backward."""
        k = len(self._started)
        while k < len(self.sync_items) and self.sync_items[k][0] >= done:
            _, kind, item = self.sync_items[k]
            if kind == "bucket":
                self._start_bucket(*item)
            else:
                self._started.append((self.zero.start_reduce_scatter(item), None))
            k += 1

    def _start_bucket(self, b, flat, _views) -> None:
        """Start bucket b's sum: its flat buffer in place, or (mixed dtypes) a flattened copy put back after it."""
        back = None
        if flat is None:
            params = [self.p.param(n) for n in b.params]
            flat = torch.cat([(q.grad if q.grad is not None else torch.zeros_like(q)).reshape(-1) for q in params])
            back = (b, params, flat)
        start = getattr(self.comm, "start_sum", None)
        if start is None:
            self.comm.sum_over(flat, b.method, b.ranks, b.server)
            self._started.append((None, back))
        else:
            self._started.append((start(flat, b.method, b.ranks, b.server), back))

    def _sync(self) -> None:
        """Start the buckets not started yet, wait for every bucket's sum, then the SFB all-gathers."""
        self._start_ready_buckets(-1)
        started, self._started = self._started, []
        for handle, back in started:
            if handle is not None:
                handle.wait()
            if back is not None:
                b, params, flat = back
                pos = 0
                for name, q in zip(b.params, params):
                    if self.rank in self.s.param_users[name]:
                        q.grad = flat[pos: pos + q.numel()].view_as(q).clone()
                    pos += q.numel()
        for op in self.s.sfb:
            if self.rank not in op.ranks:
                continue
            self.p.param(op.param).grad = sfb_weight_grad(op, self.g.ops[op.op_id], self.sfb_store.get(op.op_id, []),
                                                          self.s, self.comm, self.p.param(op.param))

    def _bucket_views(self, b) -> tuple[torch.Tensor | None, list[tuple[torch.Tensor, torch.Tensor]]]:
        """(flat gradient buffer of bucket `b`, [(parameter, its slice)] for the parameters this rank uses).

        Each step the buffer is zeroed and the slices become the parameters' ``.grad``: autograd adds every
        gradient into them in place and the collective sums the buffer in place, so the sync needs no
        flatten or copy-back and no fresh bucket-sized memory (as DDP's gradient-as-bucket-view). (None, [])
        when the bucket's parameters differ in dtype or device: that bucket is flattened per step instead.
        """
        params = [self.p.param(n) for n in b.params]
        if len({(q.dtype, q.device) for q in params}) != 1:
            return None, []
        flat = torch.zeros(sum(q.numel() for q in params), dtype=params[0].dtype, device=params[0].device)
        views, pos = [], 0
        for name, q in zip(b.params, params):
            if self.rank in self.s.param_users[name]:
                views.append((q, flat[pos: pos + q.numel()].view_as(q)))
            pos += q.numel()
        return flat, views

    def _zero_grads(self) -> None:
        """Clear the step's gradients: bucketed parameters' .grad become views of their zeroed bucket buffer, ZeRO
        stage 1 parameters' views of their unit's (`ZeroShards.start_step`)."""
        self.correct = 0.0
        for n in self.my_params:
            self.p.param(n).grad = None
        self.zero.start_step()
        for _, flat, views in self.grad_buckets:
            if flat is not None:
                flat.zero_()
                for q, view in views:
                    q.grad = view

    def _sync_and_update(self) -> None:
        """Sum the gradients, step the optimizer (through the fp16 loss scaler), all-gather ZeRO 1-2 weights."""
        self._sync()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
        elif self.optimizer is not None:
            self.optimizer.step()
        self.zero.after_step()

    # ---- the trained state (checkpoints, results) ---------------------------------------------------------------
    def trained_weights(self) -> dict[str, torch.Tensor]:
        """{parameter: full value} of every parameter this rank trains (ZeRO 3 shards and tensor-sharded slices
        all-gathered; a collective)."""
        out = {n: self.p.param(n).detach().clone() for n in self.opt_params}
        out.update(self.zero.full_weights())
        return self.shard.whole_weights(out)

    def optimizer_state(self) -> dict[str, dict]:
        """{parameter: optimizer state, full tensors} of the parameters this rank trains (a collective, as above)."""
        from tag.deploy.checkpoint import optimizer_state_by_name

        out = optimizer_state_by_name(self.optimizer, self.opt_params)
        out.update(self.zero.optimizer_state(self.optimizer, len(self.opt_params)))
        return self.shard.whole_state(out)

    def load_state(self, weights: dict, opt_by_name: dict) -> None:
        """Set this rank's trained parameters and optimizer state from full per-parameter values (a checkpoint)."""
        from tag.deploy.checkpoint import load_optimizer_state

        weights, opt_by_name = self.shard.local(weights, opt_by_name)
        with torch.no_grad():
            for n in self.opt_params:
                self.p.param(n).copy_(weights[n])
        load_optimizer_state(self.optimizer, self.opt_params, opt_by_name)
        self.zero.load(weights, opt_by_name, self.optimizer, len(self.opt_params))
