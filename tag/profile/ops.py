"""Measure the forward and backward time of every op (and op group) of a model on the local device.

The model runs through the deploy converter (`tag.deploy.onnx_torch.TorchProgram`), so the figures are
those of the code deploy runs. For each row count r:

1. the whole model runs once on seeded synthetic data of r rows (`tag.deploy.data.synthetic_batch`)
   to give every op realistic inputs;
2. every distinct op signature (`tag.cost.profile_db.op_signature`; ops that share one are measured once)
   is timed alone: **forward** = the op run with autograd recording, its float activation inputs and its
   parameters requiring gradients, as in training; **backward** = ``torch.autograd.grad`` of the op's
   float outputs (output gradients of ones, prepared untimed) with respect to those inputs and
   parameters, after an untimed fresh forward. An op with no differentiable output has backward 0.
3. every group is timed the same way as one run of its ops (its inputs: tensors it reads from outside;
   its outputs: tensors read outside it or graph outputs); the sum of its ops' figures is kept next to it.
4. with groups, the deploy runtime's step itself (`tag.profile.step`): per group in the step, the optimizer
   update, the rest of the step and the sync-bucket copies (the profile's ``step`` block).

5. with ``contention_ranks`` >= 2 (a CPU step profile), what that many ranks stepping at once do to each other
   (`tag.profile.contention`: the profile's ``contention`` block), each at `probe_rows` (a measured row count near
   the largest / ranks, so the step block holds the probe's step and the rank speed can be read off).

Each figure is the median of `repeats` calls after `warmup` untimed ones, ms, with the intra-op thread
count a rank of the device runs with under deploy (one by default), on the clock `clock` names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from tag.cost.profile_db import GroupProfile, OpProfile, ProfileDB, op_signature
from tag.profile.timing import machine_block, median_ms, set_clock


@dataclass
class OpsSettings:
    """How to measure: row counts, warm-up and timed calls per figure, threads, seed, device."""

    rows: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    warmup: int = 2
    repeats: int = 5
    threads: int = 1
    seed: int = 0
    device: str = "cpu"
    device_type: str = "cpu"
    groups: bool = True  # also time each op group as one run
    step: bool = True  # also measure the deploy runtime's step (`tag.profile.step`; needs groups)
    optimizer: str = "adam"  # the optimizer the step profile runs (deploy's default)
    lr: float = 1e-3
    quick_machine: bool = False  # smaller matmul / copy for the machine block (tests)
    clock: str = "wall"  # "wall" or "thread" (thread CPU time: one-thread CPU ranks; `tag.profile.timing`)
    contention_ranks: int = 0  # >= 2: measure the contention block with that many ranks (`tag.profile.contention`)


def measured_ops(graph) -> dict[str, list[int]]:
    """Signature -> indices of the compute ops (not weight generators) that share it, in graph order."""
    out: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        if op.is_weight_generator:
            continue
        out.setdefault(op_signature(op, graph), []).append(i)
    return out


def _float(t) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.dtype.is_floating_point


class _Runner:
    """Times a set of ops of a TorchProgram on given inputs: forward with autograd, and backward."""

    def __init__(self, prog, graph, settings: OpsSettings):
        self.prog, self.graph, self.s = prog, graph, settings
        self.data = set(graph.data_inputs)

    def _leaves(self, inputs: dict):
        """Fresh autograd leaves of `inputs` (float tensors that are not data inputs require grad); a sequence value
        (a list, from SplitToSequence) becomes a list of such leaves."""
        def leaf(name, t):
            t = t.detach()
            return t.requires_grad_() if _float(t) and name not in self.data else t

        return {name: [leaf(name, x) for x in t] if isinstance(t, (list, tuple)) else leaf(name, t)
                for name, t in inputs.items()}

    def times(self, op_ids: Sequence[int], inputs: dict, outputs: Sequence[str], params: Sequence[str], rows: int) -> tuple[float, float]:
        """(forward ms, backward ms) of running `op_ids` on `inputs` for `rows` rows."""
        import torch

        prog, s = self.prog, self.s
        param_tensors = [prog.param(p) for p in dict.fromkeys(params) if p in prog.param_names]

        def forward(leaves):
            return prog.run_ops(op_ids, leaves, rows)

        with torch.enable_grad():
            fwd = median_ms(forward, warmup=s.warmup, repeats=s.repeats, device=s.device,
                            setup=lambda: self._leaves(inputs))
            probe = forward(self._leaves(inputs))
            if not any(t.requires_grad for t in _float_tensors(probe, outputs)):
                return fwd, 0.0

            def setup():
                leaves = self._leaves(inputs)
                env = forward(leaves)
                outs = [t for t in _float_tensors(env, outputs) if t.requires_grad]
                wrt = [t for t in _float_tensors(leaves, leaves) if t.requires_grad] + param_tensors
                return outs, [torch.ones_like(o) for o in outs], wrt

            def backward(arg):
                outs, grads, wrt = arg
                torch.autograd.grad(outs, wrt, grad_outputs=grads, allow_unused=True)

            bwd = median_ms(backward, warmup=s.warmup, repeats=s.repeats, device=s.device, setup=setup)
        return fwd, bwd


def _float_tensors(env: dict, names) -> list:
    """The float tensors of env[name] for each name present: the value itself, or a sequence value's elements."""
    out = []
    for n in names:
        v = env.get(n)
        out += [x for x in (v if isinstance(v, (list, tuple)) else [v]) if _float(x)]
    return out


def _group_io(graph, op_ids: Sequence[int]) -> tuple[list[str], list[str], list[str]]:
    """(tensors read from outside, tensors read outside or graph outputs, parameters) of a set of ops."""
    inside = set(op_ids)
    produced = {o for i in op_ids for o in graph.ops[i].outputs if o}
    reads, outs, params = [], [], []
    graph_outputs = set(graph.outputs)
    for i in op_ids:
        op = graph.ops[i]
        reads += [x for x in op.inputs if x and x not in produced]
        params += list(op.params)
        for o in op.outputs:
            t = graph.tensors.get(o)
            if o and (o in graph_outputs or (t is not None and any(c not in inside for c in t.consumers))):
                outs.append(o)
    return list(dict.fromkeys(reads)), outs, params


def profile_ops(model_path: str, graph, gg=None, settings: OpsSettings | None = None,
                progress: Callable[[int], None] | None = None) -> ProfileDB:
    """Measure every op signature of `graph` (and every group of `gg`) at each row count; a ProfileDB.

    `progress(n)` is called after each measured op or group. Times are ms; see the module docstring.
    """
    import onnx
    import torch

    from tag.deploy.data import synthetic_batch
    from tag.deploy.onnx_torch import TorchProgram

    s = settings or OpsSettings()
    set_clock(s.clock)
    torch.set_num_threads(s.threads)
    device = torch.device(s.device)
    proto = onnx.load(model_path)
    prog = TorchProgram(proto, graph, seed=s.seed, model_path=model_path).to(device)
    runner = _Runner(prog, graph, s)
    sigs = measured_ops(graph)
    fwd = {sig: [] for sig in sigs}
    bwd = {sig: [] for sig in sigs}
    group_ids = [g.op_ids for g in gg.groups] if (gg is not None and s.groups) else []
    group_times = [([], [], [], []) for _ in group_ids]
    rows_list = sorted(set(int(r) for r in s.rows))
    _warm_up(prog, graph, rows_list[0], s.seed, device)
    for rows in rows_list:
        data, _ = synthetic_batch(graph, rows, s.seed)
        data = {k: v.to(device) for k, v in data.items()}
        with torch.no_grad():
            env = prog.run_ops(range(len(graph.ops)), data, rows)
        op_fwd: dict[int, float] = {}
        op_bwd: dict[int, float] = {}
        for sig, ids in sigs.items():
            op = graph.ops[ids[0]]
            inputs = {x: env[x] for x in op.inputs if x and x in env}
            f, b = runner.times([ids[0]], inputs, [o for o in op.outputs if o], op.params, rows)
            fwd[sig].append(f)
            bwd[sig].append(b)
            for i in ids:
                op_fwd[i], op_bwd[i] = f, b
            if progress:
                progress(1)
        for g, op_ids in enumerate(group_ids):
            reads, outs, params = _group_io(graph, op_ids)
            f, b = runner.times(op_ids, {x: env[x] for x in reads if x in env}, outs, params, rows)
            gf, gb, sf, sb = group_times[g]
            gf.append(f)
            gb.append(b)
            sf.append(sum(op_fwd.get(i, 0.0) for i in op_ids))
            sb.append(sum(op_bwd.get(i, 0.0) for i in op_ids))
            if progress:
                progress(1)
    ops = {sig: OpProfile(list(rows_list), fwd[sig], bwd[sig]) for sig in sigs}
    groups = []
    for op_ids, (gf, gb, sf, sb) in zip(group_ids, group_times):
        names = [graph.ops[i].name for i in op_ids if not graph.ops[i].is_weight_generator]
        if names:
            groups.append(GroupProfile(names, list(rows_list), gf, gb, sf, sb))
    step = None
    if s.step and group_ids and str(device) == "cpu":
        from tag.profile.step import profile_step

        step = profile_step(proto, graph, gg,
                            rows_list, warmup=s.warmup, repeats=s.repeats, seed=s.seed, optimizer=s.optimizer,
                            lr=s.lr, progress=progress)
    machine = machine_block(device, s.threads, quick=s.quick_machine)
    settings_block = {"rows": list(rows_list), "warmup": s.warmup, "repeats": s.repeats, "seed": s.seed,
                      "device": str(device), "model": str(model_path), "ops": sum(len(v) for v in sigs.values()),
                      "signatures": len(sigs), "groups": len(groups), "clock": s.clock}
    quota = None
    if s.clock == "thread" and str(device) == "cpu":
        from tag.profile.quota import cpu_quota_cores

        quota = cpu_quota_cores()
    terms, raw = None, {}
    if step is not None and s.contention_ranks >= 2:
        from tag.cost.profile_db import contention_from_json
        from tag.profile.contention import measure_contention

        raw = measure_contention(model_path, graph, [list(g) for g in group_ids], probe_rows(rows_list, s.contention_ranks),
                                 ranks=s.contention_ranks, seed=s.seed, optimizer=s.optimizer, lr=s.lr, clock=s.clock)
        terms = contention_from_json(str(model_path), "contention", raw, step, quota)
        if progress:
            progress(1)
    return ProfileDB(device_type=s.device_type, threads=s.threads, machine=machine, ops=ops, groups=groups,
                     dispatch_ms=machine["dispatch_ms"], settings=settings_block, step=step, contention=terms,
                     contention_raw=raw, cpu_quota_cores=quota)


def probe_rows(rows_list: list[int], ranks: int) -> int:
    """The rows each contention-probe rank steps: the largest measured row count at most max(rows) / ranks (as
    data-parallel ranks split the largest batch), else the smallest, so the step block holds the probe's step.

    >>> probe_rows([4, 8, 16, 32, 48, 64], 2), probe_rows([16], 2), probe_rows([4, 8, 16], 3)
    (32, 16, 4)
    """
    share = max(1, rows_list[-1] // ranks)
    return max([r for r in rows_list if r <= share], default=rows_list[0])


def _warm_up(prog, graph, rows: int, seed: int, device) -> None:
    """One untimed training-like forward and backward of the whole model (autograd engine, allocator)."""
    import torch

    from tag.deploy.data import synthetic_batch

    data, _ = synthetic_batch(graph, rows, seed)
    env = prog.run_ops(range(len(graph.ops)), {k: v.to(device) for k, v in data.items()}, rows)
    outs = [env[o] for o in graph.outputs if _float(env.get(o)) and env[o].requires_grad]
    if outs:
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    prog.zero_grad(set_to_none=True)


def work_items(graph, gg, settings: OpsSettings) -> int:
    """Number of progress steps `profile_ops` will report (signatures and groups, per row count)."""
    n_groups = len(gg.groups) if (gg is not None and settings.groups) else 0
    n_step = len(set(settings.rows)) + n_groups if (n_groups and settings.step and settings.device == "cpu") else 0
    n_contention = 1 if (n_step and settings.contention_ranks >= 2) else 0
    return (len(measured_ops(graph)) + n_groups) * len(set(settings.rows)) + n_step + n_contention
