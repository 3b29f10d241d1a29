"""Multi-start refinement (`tag.search.multistart`): which starts are refined, in what order, with what budget (by hand,
with a recording refinement); the other starts refined in the tree's space (`structure_plan.other_starts`); and the
structure tree's search against refinement from the starts alone on a case where it used to end slower (wide_mlp on
two V100s and two P100s, benchmarks/shard.py case 4 without shards)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

import tag.search.multistart as multistart
from tag.strategy import Decision, Strategy


@dataclass
class R:
    iteration_ms: float
    oom: bool = False


def _s(*rows):
    return Strategy(tuple(Decision(tuple(rows), "ring") for _ in range(2)))


def test_order_budgets_variants_and_skips(monkeypatch):
    calls = []
    monkeypatch.setattr(multistart, "refine_pass",
                        lambda space, ev, start, max_simulations, cap=None: calls.append((start, max_simulations)))
    first, root, a, b, c, d, dv = _s(4, 0), _s(3, 1), _s(2, 2), _s(1, 3), _s(0, 4), _s(4, 4), _s(5, 5)
    p1, p2, h1, h2 = _s(6, 0), _s(0, 6), _s(7, 0), _s(0, 7)
    baselines = {"root": (root, R(5.0)), "a": (a, R(9.0)), "b": (b, R(6.0)), "c": (c, R(math.inf, oom=True)),
                 "d": (d, R(math.inf, oom=True))}
    variants = {"d+memory": (dv, R(7.0))}  # a baseline that does not fit is refined from its memory variant
    candidates = {"p1": (p1, R(8.0)), "p2": (p2, R(4.0, oom=True))}  # the fastest pipeline that fits: p1
    sharded = {"h1": (h1, R(3.0)), "h2": (h2, R(2.0))}  # the fastest shard candidate: h2
    multistart.refine_starts(None, None, first, baselines=baselines, variants=variants, candidates=candidates,
                             sharded=sharded, skip=(root,), refine_simulations=300)
    # first with the whole budget; then the other starts fastest first (c, which does not fit and has no variant,
    # last: inf), then the fastest fitting pipeline and shard candidate, each a quarter; the root is skipped
    assert calls == [(first, 300), (b, 75), (dv, 75), (a, 75), (c, 75), (p1, 75), (h2, 75)]


def test_a_start_that_is_first_is_refined_again_and_skips_are_not(monkeypatch):
    calls = []
    monkeypatch.setattr(multistart, "refine_pass",
                        lambda space, ev, start, max_simulations, cap=None: calls.append((start, max_simulations)))
    first, a, root = _s(4, 0), _s(2, 2), _s(3, 1)
    multistart.refine_starts(None, None, first, baselines={"f": (first, R(1.0)), "a": (a, R(2.0)),
                                                           "r": (root, R(0.5))}, variants={},
                             candidates={"p": (a, R(2.0))}, sharded={"h": (root, R(0.1))}, skip=(root,),
                             refine_simulations=8)
    # first again after its own budget (the cache makes its path free: it goes on from where it stopped); a twice,
    # as a baseline and as the fastest pipeline; the root never, though it is also the fastest shard candidate
    assert calls == [(first, 8), (first, 2), (a, 2), (a, 2)]


def test_other_starts_fastest_first_without_the_root_its_twins_or_what_does_not_fit():
    """`structure_plan.other_starts`: the starts refined in the tree's best plan's space after a structural move."""
    from tag.search.structure_plan import other_starts

    root, a, b, c, d = _s(4, 0), _s(2, 2), _s(3, 1), _s(1, 3), _s(0, 4)
    baselines = {"root": (root, R(5.0)), "a": (a, R(7.0)), "b": (b, R(6.0)), "c": (c, R(math.inf, oom=True)),
                 "d": (d, R(9.0, oom=True))}
    variants = {"d+memory": (_s(0, 4), R(6.5))}  # a baseline that does not fit is refined from its memory variant
    assert other_starts(baselines, variants, root) == [b, variants["d+memory"][0], a]
    # the evaluator's key says b is the root in another form: left out
    key = {root: "k0", a: "ka", b: "k0", variants["d+memory"][0]: "kd"}.get
    assert other_starts(baselines, variants, root, key) == [variants["d+memory"][0], a]


def test_structure_search_not_slower_than_refinement_from_the_starts(tmp_path):
    """Before multi-start refinement ran after the structure tree, the tree's search took a 2-stage pipeline that
    refined to 31.47 ms while refinement from the starts alone (`--playouts 0`) reached 31.17 ms."""
    from tag.bench.wide_mlp import write_wide_mlp
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.planner import plan

    model = tmp_path / "wide_mlp.onnx"
    write_wide_mlp(str(model), (2048, 16384, 16384, 2048))
    topo = tmp_path / "mixed.json"
    topo.write_text(json.dumps({"version": 1, "name": "v100p100-mixed", "machines": [
        {"name": "m0", "devices": [{"type": "V100-16GB", "count": 2}, {"type": "P100-12GB", "count": 2}],
         "intra_bandwidth_gbps": 1200}]}))
    inp = load_inputs(str(model), str(topo), ModelOptions(batch_size=128, precision="fp32"))

    def ms(**kw):
        return plan(inp.gg, inp.cluster, inp.cost, inp.training, sfb=False, shard=False, budget_s=None, workers=0,
                    **kw).result.iteration_ms

    starts_only, searched = ms(playouts=0), ms(playouts=200)
    assert searched <= starts_only * (1 + 1e-9)
    assert searched < 31.4  # the pipeline's basin alone refined to 31.47 ms
