"""ZeRO stages 1-3 on a rank: the flat shards of its units (`tag.deploy.zero_plan`), their collectives and state.

Per unit of n ranks, with N parameter elements padded to n s (s = ceil(N / n)), rank index i owns elements
[i s, (i + 1) s) of the flat vector, and its optimizer updates only that shard (a *master shard*, an fp32
``nn.Parameter`` of s elements). Adam, momentum and SGD act element by element, so updating the shards of the
flattened parameters is the update of the whole parameters.

* Stage 1: the unit's weights live in one flat fp32 buffer (the program's parameters are views of it) and the master
  shard is a view of its owned slice. The unit's gradients leave the plan's buckets: they accumulate in one flat
  gradient buffer kept from step to step (zeroed at the start of each; the parameters' ``.grad`` are views of it,
  autograd adds into them), which is reduce-scattered into the master shard's ``.grad`` with the stage 2-3 units of
  its bucket (below), so the sums move what the simulator charges (`tag.sim.zero`: a reduce-scatter, not an
  all-reduce and a slice). After the optimizer step the shards are all-gathered into the flat buffer
  (``all_gather_single``): every replica again holds the full weights. Persistent: P + S/n + G.
* Stage 2: as stage 1, but the gradient buffer is not kept: just before the group's backward the rank
  allocates one zeroed flat gradient buffer, and once the backward of the plan bucket's lowest group has run, the
  buffers of the bucket's units are reduce-scattered (``reduce_scatter_single``) into their master shards' ``.grad``,
  one call for the bucket (`zero_plan.scatter_batches`); each buffer is dropped when the call completes.
  Persistent: P + S/n + G/n.
* Stage 3: the master shard is the only persistent copy of the weights (the program's parameters are emptied). Before
  the group's forward, and again before its backward, the shards are all-gathered into a flat leaf tensor whose
  slices the group's ops read; after each, its storage is freed (``untyped_storage().resize_(0)``, as FSDP frees a
  flat parameter; autograd's saved views see the storage again once it is refilled). Autograd accumulates the
  group's weight gradients into the flat leaf's ``.grad``, which is reduce-scattered as in stage 2.
  Persistent: P/n + S/n + G/n.

On CPU ranks the reduce-scatter and the all-gather are direct messages between the unit's ranks
(`tag.deploy.p2p_collectives.post_scatter_sums` with ``out``, `machine_gather`), on the calling thread: gloo's own
ran them 2.6x (reduce-scatter) and 1.5x (all-gather) its all-reduce of the same bytes (64 MiB, 2 local ranks). A
bucket's reduce-scatters are one batch of messages (one rendezvous of the ranks, each costing a wake-up, ~1 ms on
the 2-core VM, `tag.sim.cpu_calls`), as are the stage 1-2 gathers after the step.

Every collective goes through `Comm.run_ordered`, behind the gradient sums already started, so the collectives of
every process group reach its ranks in one order.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from tag.deploy.p2p_collectives import SCATTER_TAG, ZERO_GATHER_TAG, machine_gather, post_gathers, post_scatter_sums
from tag.deploy.zero_plan import ZeroUnit, shard_elements


class _UnitState:
    """One unit on this rank: parameter layout, the flat weights (stages 1-2) or gather leaf (3), the master shard."""

    def __init__(self, unit: ZeroUnit, program, rank: int):
        self.unit, self.program = unit, program
        params = [program.param(n) for n in unit.params]
        self.shapes = [tuple(p.shape) for p in params]
        self.numels = [p.numel() for p in params]
        self.offsets = [sum(self.numels[:k]) for k in range(len(params))]
        self.total = sum(self.numels)
        n = len(unit.ranks)
        self.shard = shard_elements(self.total, n)
        self.index = unit.ranks.index(rank)
        self.lo, self.hi = self.index * self.shard, (self.index + 1) * self.shard
        flat = torch.zeros(n * self.shard, dtype=params[0].dtype, device=params[0].device)
        with torch.no_grad():
            for p, off, k in zip(params, self.offsets, self.numels):
                flat[off: off + k].copy_(p.reshape(-1))
        self.grad_flat: torch.Tensor | None = None  # stages 1-2: this step's full gradient, until its reduce-scatter
        self.grad_kept: torch.Tensor | None = None  # stage 1: the gradient buffer kept from step to step
        if unit.stage < 3:
            self.flat = flat
            for p, view in zip(params, self.views(flat)):
                p.data = view
            self.master = torch.nn.Parameter(flat[self.lo: self.hi])  # shares the flat buffer's storage
        else:
            self.master = torch.nn.Parameter(flat[self.lo: self.hi].clone())
            self.flat = flat.requires_grad_(True)  # the gather leaf
            _free(self.flat)
            for p in params:
                p.data = torch.empty(0, dtype=p.dtype, device=p.device)

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """The unit's parameters as views of a flat vector laid out like the unit (the padding past them left out).

        One ``split`` makes them, not a slice each: autograd's backward of k slices of a stage-3 leaf of S elements
        builds k zero-filled S-element gradients and adds them up, where one split's backward concatenates the k
        gradients once (what FSDP's flat parameter does)."""
        pad = flat.numel() - self.total
        parts = flat.split(list(self.numels) + ([pad] if pad else []))
        return [part.view(shape) for part, shape in zip(parts, self.shapes)]

    def gathered(self, comm) -> torch.Tensor:
        """A fresh flat vector of the whole unit's weights, all-gathered from the master shards."""
        out = torch.empty(self.flat.shape, dtype=self.master.dtype, device=self.master.device)
        self.all_gather_into(out, comm)
        return out

    def all_gather_into(self, out: torch.Tensor, comm) -> None:
        """All-gather the master shards into `out` (the unit's padded flat layout). On CPU ranks by direct messages
        on the calling thread (`p2p_collectives.machine_gather`, into `out`'s slices: no staging copy, no hand-over
        to the sync thread; gloo's all_gather_single took 63.6 ms for 64 MiB on 2 local ranks, the messages 31.8):
        their own tag keeps them apart from the sums the sync thread may be running, and every rank issues them in
        program order. Else the library's all-gather, ordered behind the started sums (`Comm.run_ordered`)."""
        if out.device.type == "cpu":
            mine = out[self.lo: self.hi]
            if mine.data_ptr() != self.master.data_ptr():  # stage 3 and checkpoints: the shard is apart
                mine.copy_(self.master.detach())
            machine_gather(out, self.unit.ranks, len(self.unit.ranks), self.unit.ranks[self.index], ZERO_GATHER_TAG)
            return
        shard = self.master.detach().clone()
        group = comm.group(self.unit.ranks)
        comm.run_ordered(lambda: dist.all_gather_single(out, shard, group=group, async_op=True)).wait()


def _free(t: torch.Tensor) -> None:
    t.untyped_storage().resize_(0)


def _alloc(t: torch.Tensor) -> None:
    t.untyped_storage().resize_(t.numel() * t.element_size())


class ZeroShards:
    """The ZeRO units of rank `rank` (those it is a replica of) over `program`'s parameters."""

    def __init__(self, units: list[ZeroUnit], program, rank: int, comm):
        self.comm = comm
        self.units = [_UnitState(u, program, rank) for u in units if rank in u.ranks]
        self.by_group = {s.unit.group: s for s in self.units}
        self.params = {n for s in self.units for n in s.unit.params}

    def masters(self) -> list[torch.nn.Parameter]:
        return [s.master for s in self.units]

    def start_step(self) -> None:
        """Clear the step's gradients: stage 1 parameters' .grad become views of their unit's kept buffer, zeroed (once
        a step, so a pipeline's micro-batches accumulate into it); the other units' gradients are made per pass."""
        for s in self.units:
            s.master.grad = None
            if s.unit.stage != 1:
                continue
            if s.grad_kept is None:
                s.grad_kept = torch.zeros_like(s.flat)
            else:
                s.grad_kept.zero_()
            s.grad_flat = s.grad_kept
            for name, view in zip(s.unit.params, s.views(s.grad_flat)):
                s.program.param(name).grad = view

    # ---- stage 3 weights and stage 2-3 gradients around a group's forward and backward ----------------------------
    def weights_for(self, g: int) -> dict[str, torch.Tensor]:
        """Stage 3: gather group g's weights into its leaf and return them by name ({} for other groups)."""
        s = self.by_group.get(g)
        if s is None or s.unit.stage < 3:
            return {}
        self._refill(s)
        return dict(zip(s.unit.params, s.views(s.flat)))

    def release(self, g: int, env: dict | None = None, outputs: list[str] = ()) -> None:
        """Stage 3: free group g's gathered weights (after its forward or backward). Outputs in `env` that are views
        of them (a Transpose of a weight handed to another group) are first replaced by copies."""
        s = self.by_group.get(g)
        if s is None or s.unit.stage != 3:
            return
        ptr = s.flat.untyped_storage().data_ptr()
        for t in outputs:
            v = env[t]
            if torch.is_tensor(v) and v.untyped_storage().data_ptr() == ptr:
                env[t] = v.clone()
        _free(s.flat)

    def before_backward(self, g: int) -> None:
        """Stage 3: gather group g's weights again; stage 2: its parameters' .grad become views of a zeroed buffer."""
        s = self.by_group.get(g)
        if s is None:
            return
        if s.unit.stage == 3:
            self._refill(s)
        elif s.unit.stage == 2:
            s.grad_flat = torch.zeros_like(s.flat)
            for name, view in zip(s.unit.params, s.views(s.grad_flat)):
                s.program.param(name).grad = view

    def _refill(self, s: _UnitState) -> None:
        _alloc(s.flat)
        s.all_gather_into(s.flat.data, self.comm)  # .data: the write is not an in-place op autograd tracks

    def start_reduce_scatter(self, groups: tuple[int, ...]):
        """Stages 1-3: start one reduce-scatter call for the full gradients of groups `groups` (one plan bucket's units
        on this rank, in the same order on every rank) into their master shards' .grad; the full gradients are
        dropped here and freed once the call has completed. Returns the handle to wait for."""
        todo = [(s, self._take_full_grad(s)) for s in (self.by_group[g] for g in groups)]
        if all(full.device.type == "cpu" for _, full in todo):  # direct messages, one batch (module docstring)
            items = [(full, s.unit.ranks, len(s.unit.ranks), s.unit.ranks[s.index], s.master.grad) for s, full in todo]
            return self.comm.run_ordered(lambda: post_scatter_sums(items, SCATTER_TAG))
        calls = [(s.master.grad, full, self.comm.group(s.unit.ranks)) for s, full in todo]

        def run():
            for w in [dist.reduce_scatter_single(out, full, group=grp, async_op=True) for out, full, grp in calls]:
                w.wait()

        return self.comm.run_ordered(run)

    @staticmethod
    def _take_full_grad(s: _UnitState) -> torch.Tensor:
        """Unit s's full flat gradient of this step, taken from its parameters (zeros if none reached them); its
        master shard's .grad becomes a fresh buffer for the reduce-scatter."""
        if s.unit.stage == 3:
            full, s.flat.grad = s.flat.grad, None
            _free(s.flat)
        else:
            full, s.grad_flat = s.grad_flat, None
            for name in s.unit.params:
                s.program.param(name).grad = None
        if full is None:  # no gradient reached the unit's weights
            full = torch.zeros(s.flat.shape, dtype=s.master.dtype, device=s.master.device)
        s.master.grad = torch.empty_like(s.master)
        return full

    # ---- after the update: stage 1-2 weights ------------------------------------
    def after_step(self) -> None:
        """Stages 1-2: all-gather the updated shards into every replica's full weights. On CPU ranks every unit's
        messages are posted as one batch (`p2p_collectives.post_gathers`, units in the same order on every rank):
        one rendezvous per step instead of one per unit, each costing a wake-up of the ranks (~1 ms on the 2-core
        VM, `tag.sim.cpu_calls`), and the simulator's one gather per bucket (`tag.sim.zero`) is what runs."""
        todo = [s for s in self.units if s.unit.stage < 3]
        if todo and all(s.flat.device.type == "cpu" for s in todo):
            for s in todo:
                mine = s.flat[s.lo: s.hi]
                if mine.data_ptr() != s.master.data_ptr():
                    mine.copy_(s.master.detach())
            post_gathers([(s.flat, s.unit.ranks, len(s.unit.ranks), s.unit.ranks[s.index]) for s in todo],
                         ZERO_GATHER_TAG)
            return
        for s in todo:
            s.all_gather_into(s.flat, self.comm)

    # ---- checkpoints and results ------------------------------------------------------------------------------------
    def full_weights(self) -> dict[str, torch.Tensor]:
        """Every unit parameter's full value (stage 3 gathered), cloned; a collective over each unit's ranks."""
        out = {}
        for s in self.units:
            flat = s.flat.detach() if s.unit.stage < 3 else s.gathered(self.comm)
            out.update({n: v.clone() for n, v in zip(s.unit.params, s.views(flat))})
        return out

    def optimizer_state(self, optimizer, first: int) -> dict[str, dict]:
        """{parameter: its optimizer state} of the units' parameters, full tensors (shards all-gathered); the master
        shards are the optimizer's parameters `first`, `first` + 1, ... A collective over each unit's ranks."""
        state = optimizer.state_dict()["state"] if optimizer is not None else {}
        out: dict[str, dict] = {}
        for j, s in enumerate(self.units):
            st = state.get(first + j, {})
            per = {n: {} for n in s.unit.params}
            for key, v in sorted(st.items()):
                if torch.is_tensor(v) and v.dim() > 0 and v.numel() == s.shard:
                    full = torch.empty(s.flat.shape, dtype=v.dtype, device=v.device)
                    group, shard = self.comm.group(s.unit.ranks), v.detach().clone()
                    self.comm.run_ordered(lambda: dist.all_gather_single(full, shard, group=group,
                                                                              async_op=True)).wait()
                    for n, view in zip(s.unit.params, s.views(full)):
                        per[n][key] = view.cpu().clone()
                else:
                    for n in s.unit.params:
                        per[n][key] = v.detach().cpu().clone() if torch.is_tensor(v) else v
            out.update({n: d for n, d in per.items() if d})
        return out

    def load(self, weights: dict, opt_by_name: dict, optimizer, first: int) -> None:
        """Set the units' weights and optimizer states from full per-parameter values (a checkpoint)."""
        sd = optimizer.state_dict() if optimizer is not None else None
        with torch.no_grad():
            for j, s in enumerate(self.units):
                flat = self._flatten(s, [weights[n] for n in s.unit.params])
                s.master.copy_(flat[s.lo: s.hi])
                if s.unit.stage < 3:
                    s.flat.copy_(flat)
                per = [opt_by_name.get(n) for n in s.unit.params]
                if sd is None or any(p is None for p in per):
                    continue
                sd["state"][first + j] = {
                    key: (self._flatten(s, [p[key] for p in per])[s.lo: s.hi].clone()
                          if torch.is_tensor(v) and v.dim() > 0 else v) for key, v in per[0].items()}
        if sd is not None:
            optimizer.load_state_dict(sd)

    @staticmethod
    def _flatten(s: _UnitState, tensors: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.zeros(s.flat.shape, dtype=s.master.dtype, device=s.master.device)
        for t, off, k in zip(tensors, s.offsets, s.numels):
            flat[off: off + k].copy_(t.reshape(-1))
        return flat
