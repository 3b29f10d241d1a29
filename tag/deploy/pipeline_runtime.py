"""One rank's training step of a pipelined plan: its stage's groups on every micro-batch, in the schedule's order.

The schedule (`tag.deploy.pipeline_schedule`) is the ordinary rank schedule of one micro-batch (micro row maps,
their transfers) plus a `PipelinePlan`. Micro-batch j covers global rows [j b, (j+1) b) with b = B / m; within it
the rank's rows of group g are [off, off + n) of the micro row map, i.e. global rows j b + off ... . For each pass
of its order (`stage_order`), the rank

- ("F", j): for each of its stage's groups g where it has rows (ascending): receives g's input slices of
  micro-batch j, assembles and runs g exactly as `RankRuntime` does, then at once posts the sends of g's outputs to
  every consumer rank (any stage);
- ("B", j): for each such group in reverse: receives the gradients of g's sent outputs, back-propagates g from its
  loss term (the micro-batch rows' share of the global-batch mean) and output gradients, then posts the sends of
  its input gradients back to the producers.

A slice read by several groups of a rank crosses once (`RankRuntime.aliases`): it is received for the lowest of them
and the others read that buffer (each through its own leaf); backward, the higher groups run first and add their
gradients of it into one sum, which the lowest sends back with its own.

Only receives block: sends are non-blocking (`isend`, waited for at the end of the step), receives are posted
`RECV_AHEAD` passes before the pass that waits for them, and every message of a step has its own tag
(`PipelinePlan.tag`), so any interleaving of the stages' orders matches sends to receives; a rank waits only for
data the schedule's dependencies already promise, so there is no deadlock. Parameter gradients
accumulate over the micro-batches (autograd adds into ``.grad``, which for bucketed parameters is a view of the
bucket buffer) and sync by the plan's buckets once, after the rank's last backward; then the optimizer steps. Per
micro-batch activations are dropped after its backward, so a rank holds at most `max_in_flight` micro-batches.

A tensor-sharded group (`tag.deploy.shard_runtime`) runs per micro-batch as it runs on the whole batch: its
replica's f / g collectives and gathers in each pass, on the replica's own process group (never the one the
point-to-point messages use); all ranks of a replica are in one stage and run its passes in one order. Its
consumers' positions above 0 send no gradient back (`Transfer.grad`), and only position 0 counts its loss term.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from tag.deploy.runtime import RankRuntime

# Receives are posted this many passes ahead of the pass that waits for them: gloo moves a message only once its
# receive is posted (a rendezvous), so a receive posted late costs a round trip through both ranks' I/O threads
# while they compute; buffers for at most 1 + RECV_AHEAD passes are held.
RECV_AHEAD = 2


class PipelineRankRuntime(RankRuntime):
    """The training step of rank `rank` under a pipelined schedule (``schedule.pipeline`` set)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plan = self.s.pipeline
        self._micro_offset = 0  # global row of the current micro-batch's first row
        self._pending: list[tuple[object, torch.Tensor]] = []  # (send work, its tensor) until the step ends
        self._posted: dict[tuple[str, int, int], tuple] = {}  # (kind, micro-batch, group) -> posted receives
        # the last step's passes: (kind, micro-batch, start, receive wait, end), seconds from the step's start
        self.pass_times: list[tuple[str, int, float, float, float]] = []

    def _training_context(self, g: int, off: int):
        return super()._training_context(g, off + self._micro_offset)

    # ---- messages ------------------------------------------------------------------------------
    def _post_send(self, x: torch.Tensor, dst: int, tag: int) -> None:
        x = x.detach().to(self.precision.wire_dtype(x.dtype)).contiguous()
        self._pending.append((dist.isend(x, dst=dst, tag=tag), x))

    def _buffer(self, tensor: str, rows: int) -> torch.Tensor:
        return torch.empty(self._shape(tensor, None if rows == 0 else rows), dtype=self._wire_dtype(tensor),
                           device=self.device)

    def _post_recv_inputs(self, j: int, g: int) -> tuple[list, dict[str, list[tuple[int, torch.Tensor]]]]:
        """Post the receives of group g's input slices of micro-batch j: (works, tensor -> [(start row, buffer)])."""
        works, got = [], {}
        for k, tr in enumerate(self.s.transfers[g]):
            if tr.dst == self.rank:
                alias = self._alias_of(g, k)
                if alias is not None:  # the lower group's message, posted first and taken first
                    buf = self._inbox[(j, *alias)]
                else:
                    buf = self._inbox[(j, g, k)] = self._buffer(tr.tensor, tr.rows)
                    works.append(dist.irecv(buf, src=tr.src, tag=self.plan.tag(j, False, g, k)))
                got.setdefault(tr.tensor, []).append((tr.start, buf))
        return works, got

    def _send_outputs(self, j: int, p: int) -> None:
        """Post micro-batch j's slices of group p's outputs to every rank that consumes them."""
        for c, k in self.plan.sends_of[p]:
            tr = self.s.transfers[c][k]
            if tr.src != self.rank or self._alias_of(c, k) is not None:
                continue
            x = self.outs[(p, tr.tensor)]
            if not tr.whole:
                off, _ = self._rows(p)
                x = self._narrow(x, tr.tensor, tr.start - off, tr.rows)
            self._post_send(x, tr.dst, self.plan.tag(j, False, c, k))

    def _post_recv_output_grads(self, j: int, p: int) -> tuple[list, list]:
        """Post the receives of micro-batch j's gradients of group p's sent outputs: (works, [(transfer, buffer)])."""
        works, got = [], []
        for c, k in self.plan.sends_of[p]:
            tr = self.s.transfers[c][k]
            if tr.src != self.rank or not self._is_float(tr.tensor) or not tr.grad or \
                    self._alias_of(c, k) is not None:
                continue
            buf = self._buffer(tr.tensor, tr.rows)
            works.append(dist.irecv(buf, src=tr.dst, tag=self.plan.tag(j, True, c, k)))
            got.append((tr, buf))
        return works, got

    def _post_pass(self, kind: str, j: int, groups: list[int]) -> None:
        """Post every receive of pass (kind, j) over `groups`, kept in ``self._posted`` until the pass takes it."""
        post = self._post_recv_inputs if kind == "F" else self._post_recv_output_grads
        for g in groups:
            self._posted[(kind, j, g)] = post(j, g)

    def _take(self, kind: str, j: int, g: int):
        """Wait for the receives of pass (kind, j) into group g; returns what they filled (see the _post_* methods)."""
        works, got = self._posted.pop((kind, j, g))
        for w in works:
            w.wait()
        return got

    def _send_input_grads(self, j: int, g: int) -> None:
        """Post micro-batch j's gradients of group g's received inputs back to the ranks that sent them; an alias's
        gradient is added into its message's (`RankRuntime._grad_to_send`), which goes back with the lowest reader."""
        off, _ = self._rows(g)
        for k, tr in enumerate(self.s.transfers[g]):
            if tr.dst != self.rank:
                continue
            alias = self._alias_of(g, k)
            if alias is None:
                self._inbox.pop((j, g, k), None)
            if not self._is_float(tr.tensor) or not tr.grad:
                continue
            dx = self._leaf_grad(g, tr.tensor)
            if not tr.whole:
                dx = self._narrow(dx, tr.tensor, tr.start - off, tr.rows)
            dx = self._grad_to_send((j, g, k), alias, dx)
            if dx is not None:
                self._post_send(dx, tr.src, self.plan.tag(j, True, g, k))

    # ---- passes and the step ------------------------------------------------------------------
    def _forward_pass(self, j: int, groups: list[int]) -> float:
        """Forward of micro-batch j through `groups` (ascending); returns the seconds spent waiting for inputs."""
        waited = 0.0
        for g in groups:
            w = time.perf_counter()
            got = self._take("F", j, g)
            waited += time.perf_counter() - w
            self._forward_compute(g, got)
            self._send_outputs(j, g)
        return waited

    def _backward_pass(self, j: int, groups: list[int]) -> float:
        """Backward of micro-batch j through `groups` in reverse; returns the seconds spent waiting for gradients."""
        waited = 0.0
        for g in reversed(groups):
            w = time.perf_counter()
            got = self._take("B", j, g)
            waited += time.perf_counter() - w
            for tr, buf in got:
                self._add_grad(g, tr.tensor, None if tr.whole else tr.start, buf, owned=True)
            self._backward_compute(g)
            self._send_input_grads(j, g)
        return waited

    # ---- the step ------------------------------------------------------------------------------
    def step(self) -> float:
        """One training step: the rank's passes over the micro-batches, one gradient sync, the optimizer update.

        Returns this rank's loss terms summed over the micro-batches."""
        self._zero_grads()
        self.sfb_store = {}
        data_base = self.row_base  # self.data holds global rows [data_base, ...)
        mine = [g for g in self.plan.rank_groups(self.rank) if self.s.rank_rows[g][self.rank] > 0]
        states: dict[int, tuple[dict, dict, dict, dict]] = {}
        local = 0.0
        self.pass_times, self._posted, self._inbox, self._grad_acc = [], {}, {}, {}
        order = self.plan.orders[self.rank]
        posted_upto = 0  # passes [0, posted_upto) have their receives posted
        t0 = time.perf_counter()
        try:
            for i, (kind, j) in enumerate(order):
                start = time.perf_counter()
                while posted_upto < min(len(order), i + 1 + RECV_AHEAD):
                    k2, j2 = order[posted_upto]
                    self._post_pass(k2, j2, mine)
                    posted_upto += 1
                self._micro_offset = j * self.plan.micro_batch_rows
                self.row_base = data_base - self._micro_offset  # micro-batch-local row r reads data row j b + r
                if kind == "F":
                    states[j] = ({}, {}, {}, {})
                    self.outs, self.leaves, self.losses, self.grad_buf = states[j]
                    waited = self._forward_pass(j, mine)
                    local += sum(float(v.detach()) for g, v in self.losses.items() if self.shard.reports(g))
                else:
                    self.outs, self.leaves, self.losses, self.grad_buf = states.pop(j)
                    waited = self._backward_pass(j, mine)
                end = time.perf_counter()
                self.pass_times.append((kind, j, start - t0, waited, end - t0))
        finally:
            self.row_base, self._micro_offset = data_base, 0
        for w, _ in self._pending:
            w.wait()
        self._pending = []
        self._sync_and_update()
        self.outs = self.leaves = self.losses = self.grad_buf = self.sfb_store = {}
        return local
