"""The precision choice scores the stage DP's pipelines with the baselines and memory variants: small_cnn on the Metis
example cluster (A100s, V100s and T4s, so fp32 and fp16 are candidates) at the default batch. Its baselines are
faster in fp16, but its best pipeline is faster in fp32, and the choice follows the pipeline. The score of each
precision is worked out here a second way: the baselines' seeds without pipelines, then the DP's starts picked and
simulated by hand."""

import math
from dataclasses import replace

import pytest

from tag.modelio import cost_model_for, load_inputs
from tag.search.pipeline_search import KEEP, pipeline_candidates
from tag.search.precision import MIN_GAIN, auto_precisions, choose_precision, make_seeds
from tag.search.structure import PIPELINE_KEEP
from tag.sim import simulate

MODEL = "datasets/models/small_cnn.onnx"
TOPOLOGY = "datasets/topologies/metis/metis_cluster.json"


@pytest.fixture(scope="module")
def case():
    inp = load_inputs(MODEL, TOPOLOGY)
    return inp, (lambda p: cost_model_for(inp.gg, replace(inp.training, precision=p), TOPOLOGY))


def fastest_fit(results) -> float:
    return min((r.iteration_ms for r in results if not r.oom and math.isfinite(r.iteration_ms)), default=math.inf)


def by_hand(inp, cost_for, p: str):
    """(fastest fitting baseline or variant, fastest fitting pipeline start, the DP's pipelines) under precision p."""
    training, cost = replace(inp.training, precision=p), cost_for(p)
    seeds = make_seeds(inp.gg, inp.cluster, cost, training)
    found = pipeline_candidates(inp.gg, inp.cluster, cost, training, inp.batch_size, keep=PIPELINE_KEEP)
    starts, seen_stages = [], []
    for i, c in enumerate(found):  # the first KEEP, then the first of every stage count not met before
        stages = len(c.strategy.pipeline.stages) if c.strategy.pipeline is not None else None
        if i < KEEP or stages not in seen_stages:
            starts.append(c)
        seen_stages.append(stages)
    base = fastest_fit(r for _, r in list(seeds.baselines.values()) + list(seeds.variants.values()))
    piped = fastest_fit(simulate(inp.gg, inp.cluster, cost, c.strategy, training) for c in starts)
    return base, piped, found, starts


def rule(scores: dict) -> str:
    """The first precision in order unless a later one is more than MIN_GAIN faster (every score here fits)."""
    best = None
    for p, ms in scores.items():
        if best is None or ms < scores[best] * (1 - MIN_GAIN):
            best = p
    return best


def test_pipelines_are_scored_and_change_the_choice(case):
    inp, cost_for = case
    precisions = auto_precisions(inp.cluster)
    assert precisions == ["fp32", "fp16"]
    hand = {p: by_hand(inp, cost_for, p) for p in precisions}
    baselines_only = {p: hand[p][0] for p in precisions}
    with_pipelines = {p: min(hand[p][0], hand[p][1]) for p in precisions}
    # the case is one where the pipelines decide: the baselines alone choose fp16, with pipelines fp32
    assert rule(baselines_only) == "fp16" and rule(with_pipelines) == "fp32"

    before = choose_precision(inp.gg, inp.cluster, inp.training, cost_for)
    assert before.seeds.training.precision == "fp16" and before.seeds.pipelines == []
    got = choose_precision(inp.gg, inp.cluster, inp.training, cost_for, pipelines=True)
    assert got.seeds.training.precision == "fp32"
    for p in precisions:
        assert got.report["candidates"][p]["best_start_ms"] == pytest.approx(with_pipelines[p], abs=1e-4)

    # the chosen seeds carry that precision's DP pipelines, and its starts simulated, for the search to start from
    _, _, found, starts = hand["fp32"]
    assert [c.name for c in got.seeds.pipelines] == [c.name for c in found]
    assert [c.strategy for c in got.seeds.pipelines] == [c.strategy for c in found]
    assert list(got.seeds.pipeline_starts) == [c.name for c in starts]
    fp32 = replace(inp.training, precision="fp32")
    for name, (s, r) in got.seeds.pipeline_starts.items():
        assert r.iteration_ms == simulate(inp.gg, inp.cluster, cost_for("fp32"), s, fp32).iteration_ms
    # the candidate not chosen cost its baselines, memory passes and pipeline starts
    assert got.simulations > before.simulations
