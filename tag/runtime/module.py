"""Train the user's own `torch.nn.Module` under a data-parallel-family plan, uneven rows included.

Each rank runs the module on its rows [off, off + n) of the global batch (`RankPlan.sampler`), adds its share
of the global-batch loss (1/B x the sum of its rows' per-row losses, `tag.deploy.loss`), back-propagates, and
sums the gradients over the replicas bucket by bucket with the plan's algorithms (`tag.deploy.comm.Comm.sum_over`
on the schedule's buckets), so every rank holds the full-batch gradient and the optimizer step is that of one
device on the whole batch. Parameters an SFB entry covers are summed with a ring all-reduce over the SFB op's
replicas (the same gradient; SFB's saving applies to the ONNX runtime only).

The plan's parameters (the ONNX model's, as the exporter named them from the module: ``0.weight``) are matched to
``module.named_parameters()`` by name and shape (a float buffer such as ``1.running_mean`` matches a plan parameter
too; it is not trained by gradients); one that matches nothing is an InputError naming it. BatchNorm and Dropout
layers are swapped for global-batch versions (`tag.runtime.layers`), so they train like one device too.
"""

from __future__ import annotations

import torch

from tag.deploy.loss import Loss
from tag.deploy.onnx_torch.ops_nn import TrainingContext, training_context
from tag.errors import InputError


class ModuleTrainer:
    """`step(inputs, target)` trains `module` one global-batch step on this rank's rows; returns the global loss.

    plan: a `RankPlan`; optimizer: a torch optimizer over ``module.parameters()`` (identical on every rank);
    loss: a loss name (mse, cross_entropy, nll, bce) or a `tag.deploy.loss.Loss`; seed, start_step: of the dropout
    masks (step k of the run uses the masks of step k; `step_index` counts on from start_step).
    """

    def __init__(self, plan, module: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: str | Loss = "mse",
                 seed: int = 0, start_step: int = 0):
        from tag.deploy.dataset import resolve_loss
        from tag.runtime.layers import prepare_module

        self.plan, self.module, self.optimizer = plan, prepare_module(module), optimizer
        self.seed, self.step_index = seed, start_step
        self.loss = loss if isinstance(loss, Loss) else resolve_loss(loss)
        self.offset, self.rows = plan.data_parallel_rows()
        self.params = match_parameters(module, plan.job.graph, plan.job.model_path)
        self.comm = plan.collectives()
        s = plan.schedule
        self.syncs = [(b.params, b.method, b.ranks, b.server) for b in s.buckets if plan.rank in b.ranks]
        self.syncs += [((op.param,), "ring", op.ranks, None) for op in s.sfb if plan.rank in op.ranks]
        self.correct = 0.0  # rows of the last step classified right, over all ranks (classification losses; Loss.correct)
        ranks = s.ranks_of(0)
        self.stats_sum = None
        if len(ranks) > 1:
            from tag.deploy.batch_stats import group_sum

            self.stats_sum = group_sum(self.comm.group(ranks))

    def step(self, inputs, target: torch.Tensor) -> float:
        """One step on this rank's rows: `inputs` a tensor or a tuple of them (module arguments), rows on dim 0."""
        B = self.plan.batch_rows
        args = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
        self.optimizer.zero_grad(set_to_none=False)
        local, correct = 0.0, 0.0
        if self.rows > 0:
            ctx = TrainingContext(seed=self.seed, step=self.step_index, row_offset=self.offset, global_rows=B,
                                  stats_sum=self.stats_sum)
            with training_context(ctx):
                y = self.module(*args)
            term = self.loss.term(y, target, B, self.rows)
            term.backward()
            local, correct = float(term.detach()), self.loss.correct(y.detach(), target)
        self._sync()
        self.optimizer.step()
        self.step_index += 1
        self.correct = self.comm.sum_scalar(float(correct)) if self.loss.classifies else 0.0
        return self.comm.sum_scalar(local)

    def _sync(self) -> None:
        for names, method, ranks, server in self.syncs:
            ps = [self.params[n] for n in names if n in self.params]
            if not ps:
                continue
            for p in ps:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            flat = torch.cat([p.grad.reshape(-1) for p in ps])
            self.comm.sum_over(flat, method, ranks, server)
            pos = 0
            for p in ps:
                p.grad.copy_(flat[pos:pos + p.numel()].view_as(p))
                pos += p.numel()


def match_parameters(module: torch.nn.Module, graph, model_path: str) -> dict[str, torch.nn.Parameter]:
    """{plan parameter name: the module's parameter of that name}; InputError for a name or shape that does not match."""
    mine = dict(module.named_parameters())
    buffers = {n: b for n, b in module.named_buffers() if b.is_floating_point()}
    plan_params = list(graph.param_names)
    for name in mine:
        if name not in plan_params:
            raise InputError(model_path, f"parameter '{name}'",
                             "a module parameter named as in the plan's model (the exporter's names)",
                             f"no such parameter in the model (it has {', '.join(plan_params[:4])}...)")
    out = {}
    for name in plan_params:
        if name in buffers and name not in mine:
            continue
        if name not in mine:
            raise InputError(model_path, f"parameter '{name}'", "a parameter of that name in the module",
                             "none (the module does not match the plan's model)")
        shape = tuple(graph.tensors[name].shape or ())
        if tuple(mine[name].shape) != shape:
            raise InputError(model_path, f"parameter '{name}'", f"shape {shape} in the module",
                             str(tuple(mine[name].shape)))
        out[name] = mine[name]
    return out
