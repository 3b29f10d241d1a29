"""Peak live tensor bytes of a rank's training step, measured from the tensors themselves (not process RSS).

`LiveTensorBytes` is a ``TorchDispatchMode``: every ATen op that runs while it is active has its output storages
looked at, and a storage that none of the op's inputs holds (a fresh allocation, not a view or an in-place
result) is counted by its ``nbytes()`` once, until a weakref finalizer sees it freed. Tensors that exist before
the mode starts are invisible to it unless `register`-ed (the step's persistent state: weights, gradients,
optimizer states, gradient bucket buffers). So, over the step it wraps::

    live(t) = sum of nbytes of registered or op-allocated storages still alive at t,   peak = max_t live(t)

Storages resized in place (``UntypedStorage.resize_``, as ZeRO-3 frees and refills gathered weights) count at
their new size. What it does not see: tensors made outside the dispatcher (none in a deploy step: gloo receives
into buffers made by ``torch.empty``), and allocations on other threads (bucket sums run in place on their flat
buffers).

`step_probe` is the hook `tag.deploy.train.train_rank(step_probe=...)` calls around each step: it measures the
steps given and keeps each one's peak in ``peaks_bytes`` (step index -> bytes).

>>> import torch
>>> w = torch.ones(1000)  # 4,000 B made before the probe
>>> with LiveTensorBytes() as m:
...     m.register([w])
...     a = w * 2        # + 4,000 B
...     b = a.view(10, 100)  # a view: nothing new
...     del a, b
...     c = torch.zeros(500)   # + 2,000 B after a was freed
>>> m.peak_bytes, m.live_bytes
(8000, 6000)
>>> m.at_peak  # live bytes per allocating op at the peak
{'registered': 4000, 'mul': 4000}
"""

from __future__ import annotations

import contextlib
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary


class LiveTensorBytes(TorchDispatchMode):
    """Live and peak bytes of tensor storages (module docstring); `live_bytes`, `peak_bytes` are ints."""

    def __init__(self):
        super().__init__()
        self._seen = WeakIdKeyDictionary()
        self._by_origin: dict[str, int] = {}  # live bytes per allocating op ("registered" before the step)
        self.live_bytes = 0
        self.peak_bytes = 0
        self.at_peak: dict[str, int] = {}  # live bytes per allocating op at the peak

    def _free(self, record: list) -> None:
        self.live_bytes -= record[0]
        self._by_origin[record[1]] -= record[0]

    def _add(self, record: list, nbytes: int) -> None:
        record[0] += nbytes
        self.live_bytes += nbytes
        self._by_origin[record[1]] = self._by_origin.get(record[1], 0) + nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.at_peak = {k: v for k, v in self._by_origin.items() if v}

    def _count(self, storage, origin: str) -> None:
        if storage in self._seen:
            return
        record = [0, origin]  # [current bytes, allocating op]
        self._seen[storage] = record
        weakref.finalize(storage, self._free, record)
        self._add(record, int(storage.nbytes()))

    def _resize(self, storage, nbytes: int) -> None:
        """A storage resized in place (ZeRO-3 frees and refills gathered weights so): its new size counts."""
        record = self._seen.get(storage)
        if record is None:
            self._count(storage, "resize_")
        else:
            self._add(record, int(nbytes) - record[0])

    def __enter__(self):
        orig = self._orig_resize = torch.UntypedStorage.resize_

        def resize_(st, size):
            out = orig(st, size)
            self._resize(st, size)
            return out

        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._orig_resize
        return super().__exit__(*exc)

    def register(self, tensors) -> None:
        """Count tensors that already exist (persistent state the step uses) from now until they are freed."""
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._count(t.untyped_storage(), "registered")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
               if isinstance(t, torch.Tensor) and t.device.type != "meta"}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                st = t.untyped_storage()
                if st.data_ptr() not in ins:  # a fresh storage, not a view or an in-place result
                    self._count(st, str(func.overloadpacket.__name__))
        return out


def runtime_state_tensors(rt) -> list[torch.Tensor]:
    """The persistent tensors of a `RankRuntime` between steps: its parameters and their gradients, its
    optimizer's state tensors, its gradient buckets' flat buffers and ZeRO stage 1's kept gradient buffers."""
    out: list[torch.Tensor] = []
    for n in rt.my_params:
        p = rt.p.param(n)
        out.append(p)
        if p.grad is not None:
            out.append(p.grad)
    opt = getattr(rt, "optimizer", None)
    if opt is not None:
        for st in opt.state.values():
            out.extend(v for v in st.values() if isinstance(v, torch.Tensor))
    for _b, flat, _views in getattr(rt, "grad_buckets", []):
        if flat is not None:
            out.append(flat)
    for unit in getattr(getattr(rt, "zero", None), "units", []):  # ZeRO stage 1's kept gradient buffers
        if getattr(unit, "grad_kept", None) is not None:
            out.append(unit.grad_kept)
    return out


class StepProbe:
    """The `train_rank` hook: ``probe(rt, step)`` is a context manager around one step; steps in `measure` (None:
    every step) run under a `LiveTensorBytes` that starts from the runtime's persistent state
    (`runtime_state_tensors`), and their peaks land in ``peaks_bytes``, the live bytes per allocating op at each
    peak (`LiveTensorBytes.at_peak`) in ``at_peak``.

    rank_inputs: also count this rank's rows of the data inputs, copied in as the step starts and held to its end
    (`rank_data_copies`). The synthetic batch of `tag.deploy.data` holds the whole global batch on every rank,
    outside the probe; a ``--data`` loader holds the rank's rows only, as counted here. Targets are not counted.
    """

    def __init__(self, measure: set[int] | None = None, rank_inputs: bool = False):
        self.measure = measure
        self.rank_inputs = rank_inputs
        self.peaks_bytes: dict[int, int] = {}
        self.at_peak: dict[int, dict[str, int]] = {}

    @contextlib.contextmanager
    def __call__(self, rt, step: int):
        if self.measure is not None and step not in self.measure:
            yield
            return
        mode = LiveTensorBytes()
        with mode:
            mode.register(runtime_state_tensors(rt))
            held = rank_data_copies(rt) if self.rank_inputs else []
            yield
            del held
        self.peaks_bytes[step] = mode.peak_bytes
        self.at_peak[step] = dict(mode.at_peak)


def rank_data_copies(rt) -> list[torch.Tensor]:
    """Copies of the global rows [lo, hi) of every data input that this rank's groups read in the step
    (`tag.deploy.train.data_span` without an output: every micro-batch of a pipelined plan included)."""
    from tag.deploy.train import data_span

    lo, hi = data_span(rt.s, rt.rank, output="")
    if hi <= lo:
        return []
    out = []
    for t, x in rt.data.items():
        if any(t in io.data_inputs and rt.s.rank_rows[g][rt.rank] > 0 for g, io in enumerate(rt.s.groups)):
            out.append(x.narrow(rt.g.tensors[t].batch_axis or 0, lo - rt.row_base, hi - lo).clone())
    return out
