"""Blocking exchanges, as the deploy runtime runs them: a transfer is a rendezvous of its two ranks.

The deploy runtime (`tag.deploy.runtime`) walks the groups in the same order on every rank and, at each
group, posts that group's sends and receives and waits for all of them (`Comm.exchange`; gloo sends to a
peer only once the peer has posted the matching receive). So the transfer of group g's input slice from
device s to device d

* starts when **both** ranks have reached group g: s has finished its tasks before g, and so has d
  (forward: the forwards of groups < g; backward, which walks groups downwards and exchanges after a
  group's backward: the forwards and the backwards of groups >= g);
* blocks **both** ranks: the next task of each after that point waits for the delivery (on d that is
  the consumer's forward; on s, whatever it computes next).

An asynchronous model (the planner's default) starts a transfer when its producer task ends and lets
the sender run on. `exchange_gates` turns every transfer into a gate the simulator fires when the tasks
it waits for have ended.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass
class Gate:
    """A transfer that starts when every task in `wait` has ended and delivers to every task in `deliver`."""

    wait: tuple[int, ...]
    deliver: tuple[int, ...]
    spec: object  # FlowSpec
    label: str


def exchange_gates(programs: list[list[int]], tgrp: list[int], is_fwd: list[bool],
                   transfers: list[tuple[int, int, int, int, object, str]]) -> list[Gate]:
    """Gates of `transfers` (phase 0 forward / 1 backward, group g, sender, receiver, FlowSpec, label).

    `programs[x]` lists device x's task ids in program order (forwards by group ascending, backwards by
    group descending, then its optimizer step); `tgrp[k]` is task k's group and `is_fwd[k]` its phase. The
    target task of a transfer (the consumer's forward, the producer's backward) is the receiver's next
    task or comes after it; either way it is in `deliver`.
    """
    fwd_groups = [[tgrp[k] for k in p if is_fwd[k]] for p in programs]
    bwd_neg = [[-tgrp[k] for k in p if not is_fwd[k] and tgrp[k] >= 0] for p in programs]  # ascending

    def position(x: int, phase: int, g: int) -> int:
        """How many of device x's tasks come before group g's exchange."""
        if phase == 0:
            return bisect.bisect_left(fwd_groups[x], g)
        return len(fwd_groups[x]) + bisect.bisect_right(bwd_neg[x], -g)

    gates = []
    for phase, g, snd, rcv, spec, label, *target in transfers:
        wait, deliver = [], list(target)
        for x in (snd, rcv):
            pos = position(x, phase, g)
            if pos > 0:
                wait.append(programs[x][pos - 1])
            if pos < len(programs[x]) and programs[x][pos] not in deliver:
                deliver.append(programs[x][pos])
        gates.append(Gate(tuple(wait), tuple(deliver), spec, label))
    return gates
