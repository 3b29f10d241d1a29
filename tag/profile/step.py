"""Measure what a deploy training step costs beyond the ops timed alone: groups in the step, update, sync copies.

Ops timed one at a time (`tag.profile.ops`) miss what the deploy runtime (`tag.deploy.runtime.RankRuntime`)
does around them: detached leaves per group, output-gradient buffers it zero-fills and adds into, gradient
accumulation into ``.grad``, activations that stay alive until the step ends (so big tensors land on fresh,
page-faulting memory), freeing them at the end of the step, the optimizer update of every parameter, and
the gradient sync buckets' own memory work. This module measures them in the runtime itself:

1. **step groups**: the real runtime on one rank with every group on it and all ``r`` rows, for each row
   count; per group its forward and backward time inside the step (`_forward_group` / `_backward_group`
   timed per call), the optimizer step, and the rest of the step (``other_ms``: zeroing grads, the loss
   scalar, freeing the step's tensors). Median of `repeats` steps after `warmup` untimed ones.
2. **update per group**: the optimizer (fresh, at the group's real parameter shapes, state initialised by
   `warmup` untimed steps) timed alone per group.
3. **sync copies**: what a sync bucket costs the runtime beyond the collective, at each group's parameter
   bytes: ``copy_in`` = zeroing the bucket's flat gradient buffer and adding every fresh gradient into its
   slice (`RankRuntime._bucket_views`), ``copy_out`` = 0 (the collective works in place on the buffer).

Times are ms on the clock `tag.profile.timing.set_clock` chose (wall, or thread CPU time).
"""

from __future__ import annotations

import statistics

from tag.cost.profile_db import StepProfile, StepGroup
from tag.profile.timing import now_ns


def _now_ms() -> float:
    return now_ns() / 1e6


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def _single_rank_runtime(model_proto, graph, groups: list[list[int]], rows: int, seed: int, optimizer: str, lr: float):
    """A `RankRuntime` of one rank holding every group with all `rows` rows (no torch.distributed needed)."""
    from tag.deploy.comm import Comm
    from tag.deploy.data import make_optimizer, synthetic_batch
    from tag.deploy.onnx_torch import TorchProgram
    from tag.deploy.runtime import RankRuntime
    from tag.deploy.schedule import build_schedule
    from tag.strategy import Decision, Strategy

    program = TorchProgram(model_proto, graph, seed=seed)
    strategy = Strategy(tuple(Decision((rows,)) for _ in groups))
    s = build_schedule(graph, groups, strategy, ["m0"], 1)
    comm = Comm(0, 1, ["m0"], [], "cpu")
    data, targets = synthetic_batch(graph, rows, seed)
    return RankRuntime(s, graph, program, 0, comm, data, targets, make_optimizer(optimizer, lr))


def step_times(model_proto, graph, groups: list[list[int]], rows: int, *, warmup: int, repeats: int, seed: int,
               optimizer: str, lr: float) -> tuple[list[float], list[float], float, float]:
    """(fwd ms per group, bwd ms per group, optimizer step ms, rest of the step ms) of the deploy runtime's
    step on one rank with all groups and `rows` rows: medians over `repeats` steps after `warmup`."""
    rt = _single_rank_runtime(model_proto, graph, groups, rows, seed, optimizer, lr)
    k = len(groups)
    acc = {"fwd": [0.0] * k, "bwd": [0.0] * k, "upd": [0.0]}

    def timed(fn, key):
        def call(g=None):
            t0 = _now_ms()
            out = fn() if g is None else fn(g)
            acc[key][0 if g is None else g] += _now_ms() - t0
            return out
        return call

    rt._forward_group = timed(rt._forward_group, "fwd")
    rt._backward_group = timed(rt._backward_group, "bwd")
    if rt.optimizer is not None:
        rt.optimizer.step = timed(rt.optimizer.step, "upd")
    fwd, bwd, upd, other = [[] for _ in range(k)], [[] for _ in range(k)], [], []
    for i in range(warmup + repeats):
        for key in acc:
            acc[key] = [0.0] * len(acc[key])
        t0 = _now_ms()
        rt.step()
        total = _now_ms() - t0
        if i < warmup:
            continue
        for g in range(k):
            fwd[g].append(acc["fwd"][g])
            bwd[g].append(acc["bwd"][g])
        upd.append(acc["upd"][0])
        other.append(total - sum(acc["fwd"]) - sum(acc["bwd"]) - acc["upd"][0])
    return [_median(x) for x in fwd], [_median(x) for x in bwd], _median(upd), max(_median(other), 0.0)


def update_ms(shapes: list[tuple[int, ...]], optimizer: str, lr: float, *, warmup: int, repeats: int, seed: int) -> float:
    """Optimizer step over fresh fp32 parameters of `shapes` with gradients set, ms (median of `repeats`
    after `warmup` untimed steps, which also create the optimizer state)."""
    import torch

    from tag.deploy.data import make_optimizer

    if not shapes:
        return 0.0
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=gen).requires_grad_() for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    opt = make_optimizer(optimizer, lr)(params)
    times = []
    for i in range(warmup + repeats):
        t0 = _now_ms()
        opt.step()
        if i >= warmup:
            times.append(_now_ms() - t0)
    return _median(times)


def sync_copy_ms(shapes: list[tuple[int, ...]], *, warmup: int, repeats: int, seed: int) -> tuple[float, float]:
    """(copy-in ms, copy-out ms) of one sync bucket of parameters of `shapes`, as `RankRuntime` runs it: the
    bucket's flat gradient buffer zeroed at the step's start and every fresh gradient added into its slice
    (what autograd does into a ``.grad`` that is a slice of the buffer, instead of keeping the fresh tensor);
    copy-out is 0 (the collective sums the buffer in place and the slices are the gradients)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    grads_src = [torch.randn(s, generator=gen) for s in shapes]
    flat = torch.zeros(sum(_numel(s) for s in shapes))
    views, pos = [], 0
    for g in grads_src:
        views.append(flat[pos: pos + g.numel()].view_as(g))
        pos += g.numel()
    t_in = []
    for i in range(warmup + repeats):
        grads = [g.clone() for g in grads_src]  # fresh, as each backward makes them
        t0 = _now_ms()
        flat.zero_()
        for view, g in zip(views, grads):
            view.add_(g)
        t1 = _now_ms()
        del grads
        if i >= warmup:
            t_in.append(t1 - t0)
    return _median(t_in), 0.0


def fresh_fill_ms(nbytes: int, *, warmup: int, repeats: int) -> float:
    """A fresh zeroed fp32 buffer of `nbytes` bytes, ms (median of `repeats` after `warmup`): what ZeRO's runtime pays
    for the buffers it allocates every step (`tag.deploy.zero`: stage 1's master gradient, stage 2's full gradient,
    stage 3's gathered weights and their gradient); a large one is fresh pages, each faulted in as it is written."""
    import torch

    n = max(1, nbytes // 4)
    times = []
    for i in range(warmup + repeats):
        t0 = _now_ms()
        buf = torch.zeros(n)
        t1 = _now_ms()
        del buf
        if i >= warmup:
            times.append(t1 - t0)
    return _median(times)


def profile_step(model_proto, graph, gg, rows_list: list[int], *, warmup: int, repeats: int, seed: int,
                 optimizer: str = "adam", lr: float = 1e-3, progress=None) -> StepProfile:
    """The `StepProfile` of a model (see the module docstring): per group of `gg` in-step fwd/bwd ms per row
    count and isolated update ms; the step's optimizer and other ms per row count; sync copies by bytes."""
    groups = [list(g.op_ids) for g in gg.groups]
    per_rows = []
    for rows in rows_list:
        per_rows.append(step_times(model_proto, graph, groups, rows, warmup=max(warmup, 1), repeats=repeats,
                                   seed=seed, optimizer=optimizer, lr=lr))
        if progress:
            progress(1)
    out_groups = []
    copies: dict[int, tuple[float, float]] = {}
    for g, grp in enumerate(gg.groups):
        names = [graph.ops[i].name for i in grp.op_ids if not graph.ops[i].is_weight_generator]
        shapes = [tuple(graph.tensors[p].shape) for p in dict.fromkeys(grp.params)]
        nbytes = int(sum(4 * _numel(s) for s in shapes))
        upd = update_ms(shapes, optimizer, lr, warmup=max(warmup, 1), repeats=repeats, seed=seed)
        if shapes and nbytes not in copies:
            copies[nbytes] = sync_copy_ms(shapes, warmup=warmup, repeats=repeats, seed=seed)
        if names:
            out_groups.append(StepGroup(names, [r[0][g] for r in per_rows], [r[1][g] for r in per_rows], upd, nbytes))
        if progress:
            progress(1)
    sizes = sorted(copies)
    return StepProfile(optimizer=optimizer, rows=list(rows_list), groups=out_groups,
                       update_ms=[r[2] for r in per_rows], other_ms=[r[3] for r in per_rows],
                       copy_bytes=sizes, copy_in_ms=[copies[b][0] for b in sizes],
                       copy_out_ms=[copies[b][1] for b in sizes],
                       fill_ms=[fresh_fill_ms(b, warmup=warmup, repeats=repeats) for b in sizes])


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
