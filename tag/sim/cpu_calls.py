"""The cost of one collective call on CPU ranks beyond its steps: a floor on the call's latency.

A collective call on CPU ranks right after the ranks computed costs more than the sum of its steps as a hot loop
times them (`step_us`, `tag.sim.collectives`): each rank's compute ends at a different moment, the ranks' threads
sleep in gloo and wait for a core to run again, and the call's bookkeeping runs on the cores the ranks compute on
(`tag.profile.contention`'s call probe: 2 ranks, 2 ms of compute, then one 1 KiB call; a harness of the runtime's
own `Comm.start_sum` after 4 ms of compute on the 2-core VM: 0.74-0.95 ms per all-reduce call up to 256 KiB, 0.64
per point-to-point tree call, against ~0.46 ms for the hot all-reduce of `tag profile links`). When the cost model
offers one (`collective_call_ms`, from a profile's ``contention.call_ms``) and not every device of the sync is a
GPU, the call's latency is raised to at least `call_ms` of the kind of call deploy makes for the method
(`cpu_call_kind`: gloo's all-reduce for ``ring`` and ``leader``, point-to-point messages for the rest), where the
probe measured the same thing: gloo's all-reduce is one library call, so its phases' latencies (each phase's
largest, summed) are floored as a whole; a point-to-point method is a chain of exchanges (a 2-rank tree: reduce,
then broadcast) and the probe timed one exchange after compute, so only the first phase's latency is floored and
the later, hot phases keep theirs. The shortfall goes on every flow of the first phase (`with_call_floor`).
"""

from __future__ import annotations

from tag.sim.flows import FlowSpec, _with_latency

CPU_LIBRARY_CALLS = ("ring", "allreduce", "leader")  # run by gloo's own collectives on CPU ranks (`tag.deploy.comm`)


def cpu_call_kind(method: str) -> str:
    """The kind of call deploy makes for a sync `method` on CPU ranks: ``allreduce`` (gloo's collective) for
    `CPU_LIBRARY_CALLS`, ``p2p`` (point-to-point messages, `tag.deploy.p2p_collectives`) for every other method.

    >>> cpu_call_kind("ring"), cpu_call_kind("tree"), cpu_call_kind("reducescatter")
    ('allreduce', 'p2p', 'p2p')
    """
    return "allreduce" if method in CPU_LIBRARY_CALLS else "p2p"


def with_call_floor(phases: list[list[FlowSpec]], call_ms: float | None,
                    whole_call: bool = True) -> list[list[FlowSpec]]:
    """`phases` of one call floored at `call_ms` (module docstring): L = the largest flow latency of the first phase,
    summed over every phase when `whole_call` (a library collective) ; when L < call_ms every flow of the first
    phase gets ``call_ms - L`` more latency. None, 0 or no phases: unchanged.

    >>> f = FlowSpec((0,), (1.0,), 100.0, 0.1, 0, 1)
    >>> [round(s.latency_ms, 6) for ph in with_call_floor([[f, f], [f]], 0.5) for s in ph]
    [0.4, 0.4, 0.1]
    >>> [round(s.latency_ms, 6) for ph in with_call_floor([[f, f], [f]], 0.5, whole_call=False) for s in ph]
    [0.5, 0.5, 0.1]
    """
    if not call_ms or not phases:
        return phases
    counted = phases if whole_call else phases[:1]
    short = float(call_ms) - sum(max((s.latency_ms for s in ph), default=0.0) for ph in counted)
    if short <= 0:
        return phases
    return [[_with_latency(s, short) for s in phases[0]]] + [list(ph) for ph in phases[1:]]
