"""`structure_plan.other_starts`: the starts the default search refines after the structure tree, worked by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tag.search.structure_plan import other_starts
from tag.strategy import Decision, Strategy


@dataclass
class R:
    iteration_ms: float
    oom: bool = False


def _s(*rows):
    return Strategy(tuple(Decision(tuple(rows), "ring") for _ in range(2)))


def test_fastest_first_without_the_root_its_twins_or_what_does_not_fit():
    root, a, b, c, d = _s(4, 0), _s(2, 2), _s(3, 1), _s(1, 3), _s(0, 4)
    baselines = {"root": (root, R(5.0)), "a": (a, R(7.0)), "b": (b, R(6.0)), "c": (c, R(math.inf, oom=True)),
                 "d": (d, R(9.0, oom=True))}
    variants = {"d+memory": (_s(0, 4), R(6.5))}  # a baseline that does not fit is refined from its memory variant
    assert other_starts(baselines, variants, root) == [b, variants["d+memory"][0], a]
    # the evaluator's key says b is the root in another form: left out
    key = {root: "k0", a: "ka", b: "k0", variants["d+memory"][0]: "kd"}.get
    assert other_starts(baselines, variants, root, key) == [variants["d+memory"][0], a]
