"""The machine's other cores, used without changing what the search does: simulating ahead (`Prefetcher`) and
mapping a pure function over independent items (`fork_map`).

A search asks for strategies one at a time, but often knows the next few it will ask for: refinement tries a list of
neighbours in order, the memory pass a list of memory moves, SFB a list of op subsets. `Prefetcher` keeps that list
(`ahead`) and hands its strategies to worker processes, forked from this one, so they hold the same model, cluster
and cost model and run the same pure function `fn(strategy) -> SimResult`. When the search asks for a strategy
(`take`), the result comes from a worker if one has it (waiting for it if a worker is on it), and is computed here
otherwise, while the workers go on with the strategies after it.

With one worker on 2 cores, the search computes strategy i while the worker computes i + 1: a list of n that the
search walks to its end costs ~n / 2 simulations' time. The results are exactly `fn`'s (the same code on the same
inputs), and the search counts a result when it takes it, never when a worker computes it, so plans, simulation
counts and budgets are the same with any number of workers. A strategy a worker computed that the search never asks
for (it took another move first and the rest of its list changed) costs only the worker's time.

`fork_map(fn, items, workers)` is `[fn(x) for x in items]`, the items shared out between this process and `workers`
forked ones, each taking the next item not taken when it is free (the pipeline DP's searches, one per device order
and micro-batch count).

Workers are forked (`multiprocessing`'s "fork" start method, on Linux only: `can_fork`): elsewhere, or with
`workers=0`, `take` computes every strategy here. A worker that fails on a strategy (an exception) or dies leaves that strategy, or
every later one, to this process, which then raises what `fn` raises where the search asked.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections import OrderedDict, deque
from multiprocessing.connection import wait
from typing import Callable, Hashable, Iterable

MAX_KEPT = 512  # results computed ahead and not yet taken that are kept (oldest dropped first)


def can_fork() -> bool:
    """Whether workers are forked here: on Linux (elsewhere, e.g. macOS, forking a process that loaded torch is not
    safe, and `multiprocessing` defaults to spawning)."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def default_workers() -> int:
    """Worker processes for this machine: the CPUs this process may run on, less the one it runs on itself (0 on one
    CPU, or where processes are not forked, `can_fork`)."""
    if not can_fork():
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(0, cpus - 1)


def _fork(target: Callable, *args):
    """(process, this end of its pipe) of a forked daemon running target(its end of the pipe, *args)."""
    ctx = multiprocessing.get_context("fork")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=target, args=(theirs, *args), daemon=True)
    proc.start()
    theirs.close()
    return proc, mine


def _stop(conns: list, procs: list) -> None:
    """Tell the workers on `conns` to stop (None), close the pipes, and reap `procs` (killed after 1 s)."""
    for conn in conns:
        try:
            conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        conn.close()
    for proc in procs:
        proc.join(timeout=1.0)
        if proc.is_alive():
            proc.kill()


def _serve(conn, fn: Callable) -> None:
    """A worker's loop: receive a strategy, send back (True, fn(strategy)), or (False, None) when fn raised; None
    stops it."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        try:
            answer = (True, fn(msg))
        except Exception:  # noqa: BLE001 (the asking process computes it again and raises there)
            answer = (False, None)
        try:
            conn.send(answer)
        except (BrokenPipeError, OSError):
            return


class Prefetcher:
    """`take(s)` == `fn(s)` for every strategy s; strategies listed by `ahead` are computed by `workers` forked
    processes while this one does other work (module docstring). Use as a context manager, or call `close`."""

    def __init__(self, fn: Callable[[Hashable], object], workers: int = 0):
        self.fn = fn
        self.queue: deque = deque()  # strategies the search expects to ask for, in order
        self.listed: set = set()  # the strategies in `queue`
        self.done: OrderedDict = OrderedDict()  # strategy -> result computed by a worker, not yet taken
        self.busy: dict = {}  # connection -> the strategy its worker is computing
        self.idle: list = []
        self.failed: set = set()
        self.from_workers = 0  # results taken that a worker computed
        self._procs = []
        if workers > 0 and can_fork():
            for _ in range(workers):
                proc, conn = _fork(_serve, fn)
                self._procs.append(proc)
                self.idle.append(conn)

    @property
    def workers(self) -> int:
        return len(self.idle) + len(self.busy)

    def ahead(self, strategies: Iterable[Hashable]) -> None:
        """The strategies the search expects to ask for next, in order; replaces the previous list (strategies a
        worker is already computing are finished and kept). Workers get them when this process computes one itself
        (`take`), so that both compute at once: this process the strategy asked for, a worker the next ones."""
        if not self.workers:
            return
        self.queue = deque(s for s in strategies if s not in self.done and s not in self.failed)
        self.listed = set(self.queue)

    def take(self, strategy: Hashable):
        """fn(strategy): a worker's result when it has it or is computing it, else computed here."""
        if self.workers:
            if strategy in self.listed:  # this process computes it; the ones listed before it were passed over
                while True:
                    passed = self.queue.popleft()
                    self.listed.discard(passed)
                    if passed == strategy:
                        break
            self._collect(block=False)
            if strategy not in self.done and strategy in self.busy.values():
                while strategy not in self.done and strategy not in self.failed and self.busy:
                    self._collect(block=True)
            if strategy in self.done:
                self.from_workers += 1
                return self.done.pop(strategy)
            self._dispatch(skip=strategy)  # the workers go on with the strategies after this one
        return self.fn(strategy)

    def close(self) -> None:
        _stop(list(self.idle) + list(self.busy), self._procs)
        self.idle, self.busy, self._procs = [], {}, []
        self.queue.clear()
        self.listed.clear()

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _dispatch(self, skip: Hashable | None = None) -> None:
        """Give each idle worker the next listed strategy nobody has (not `skip`, which this process computes)."""
        inflight = set(self.busy.values())
        while self.idle and self.queue:
            s = self.queue.popleft()
            self.listed.discard(s)
            if s == skip or s in self.done or s in inflight or s in self.failed:
                continue
            conn = self.idle.pop()
            try:
                conn.send(s)
            except (BrokenPipeError, OSError):
                conn.close()
                continue
            self.busy[conn] = s
            inflight.add(s)

    def _collect(self, block: bool) -> None:
        """Take the answers that are in (waiting for at least one if `block`). Freed workers get more only when this
        process computes a strategy itself (`take`): given the next one at once, a worker would hold the strategy
        this process asks for next while this process waited for it."""
        if not self.busy:
            return
        for conn in wait(list(self.busy), timeout=None if block else 0):
            s = self.busy.pop(conn)
            try:
                ok, out = conn.recv()
            except (EOFError, OSError):  # the worker died: this process computes what it would have
                conn.close()
                self.failed.add(s)
                continue
            self.idle.append(conn)
            if not ok:
                self.failed.add(s)
            else:
                self.done[s] = out
                if len(self.done) > MAX_KEPT:
                    self.done.popitem(last=False)


def _serve_items(conn, fn: Callable, items: list) -> None:
    """A `fork_map` worker: receive an index, send back (True, fn(items[index])) or (False, None); None stops it."""
    _serve(conn, lambda i: fn(items[i]))


def fork_map(fn: Callable, items: Iterable, workers: int = 0) -> list:
    """[fn(x) for x in items], computed by this process and `workers` forked ones (module docstring); an item whose
    worker failed or died is computed here, so fn's exception is raised here."""
    items = list(items)
    if workers <= 0 or len(items) < 2 or not can_fork():
        return [fn(x) for x in items]
    todo = deque(range(len(items)))
    out: dict = {}
    busy: dict = {}  # connection -> index
    procs, conns = [], []
    try:
        for _ in range(min(workers, len(items) - 1)):
            proc, mine = _fork(_serve_items, fn, items)
            procs.append(proc)
            conns.append(mine)
            i = todo.popleft()
            mine.send(i)
            busy[mine] = i
        while todo or busy:
            if todo:
                i = todo.popleft()
                out[i] = fn(items[i])
            for conn in wait(list(busy), timeout=0 if todo else None):
                i = busy.pop(conn)
                try:
                    ok, res = conn.recv()
                except (EOFError, OSError):  # the worker died: its item is done here
                    ok, res = False, None
                    conn.close()
                    conns.remove(conn)
                if ok:
                    out[i] = res
                else:
                    out[i] = fn(items[i])
                if todo and conn in conns:
                    j = todo.popleft()
                    conn.send(j)
                    busy[conn] = j
    finally:
        _stop(conns, procs)
    return [out[i] for i in range(len(items))]
