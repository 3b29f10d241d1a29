"""The suite on one tiny case: its ratios against simulate() of the baselines called directly; input errors."""

import json
import math
import os

import pytest

from tag.bench.suite import run_suite, suite_options
from tag.bench.suite_format import ratio, suite_json, suite_markdown

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATASETS = os.path.join(ROOT, "datasets")


@pytest.fixture(scope="module")
def cases():
    opts = suite_options(models=["mlp"], topologies=["heterog8"], playouts=4, budget_s=60.0,
                         datasets_dir=DATASETS)
    seen = []
    out = run_suite(opts, lambda done, total, label: seen.append((done, total, label)))
    assert seen == [(0, 1, "mlp on heterog8"), (1, 1, "done")]
    return out


def _direct(baseline):
    """Iteration ms of a baseline on mlp x heterog8, loaded and simulated without tag.bench or modelio."""
    from tag.cost import RooflineCostModel
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.search.baselines import dp_even, dp_proportional
    from tag.sim import simulate
    from tag.strategy import TrainingConfig
    from tag.topology import load_topology

    cluster = load_topology(os.path.join(DATASETS, "topologies", "heterog8.json"))
    graph = load_model(os.path.join(DATASETS, "models", "mlp.onnx"), n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    training = TrainingConfig(optimizer="adam")
    cost = RooflineCostModel(gg, training)
    make = {"dp-even": dp_even, "dp-proportional": dp_proportional}[baseline]
    res = simulate(gg, cluster, cost, make(gg, cluster, cost, training, graph.batch_size), training)
    assert not res.oom
    return res.iteration_ms, graph.batch_size


def test_ratio_matches_direct_simulation(cases):
    (case,) = cases
    assert case.error is None
    even_ms, batch = _direct("dp-even")
    prop_ms, _ = _direct("dp-proportional")
    assert case.batch == batch
    assert abs(even_ms / prop_ms - 1.0) > 0.01  # heterog8's devices differ: the ratio is not trivially 1
    assert case.ms["dp-even"] == pytest.approx(even_ms, rel=1e-9)
    assert ratio(case, "dp-proportional") == pytest.approx(even_ms / prop_ms, rel=1e-9)
    obj = json.loads(json.dumps(suite_json(cases)))
    assert obj["cases"][0]["speedup_over_dp_even"]["dp-proportional"] == pytest.approx(even_ms / prop_ms, rel=1e-9)
    assert f"| {even_ms / prop_ms:.2f} |" in suite_markdown(cases)


def test_ideal_bounds_every_strategy(cases):
    (case,) = cases
    finite = [v for k, v in case.ms.items() if math.isfinite(v) and k != "ideal"]
    assert len(finite) >= 3 and all(case.ms["ideal"] <= v for v in finite)


def test_summary_geomean_by_hand():
    from tag.bench.suite import Case
    from tag.bench.suite_format import summarise

    cs = [Case("a", "t", ms={"dp-even": 10.0, "dp-proportional": 10.0, "plan+sfb": 5.0}, search_s=1.0),
          Case("b", "t", ms={"dp-even": 10.0, "dp-proportional": 20.0, "plan+sfb": 1.25}, search_s=3.0),
          Case("c", "t", ms={"dp-even": math.inf, "plan+sfb": 1.0}, search_s=2.0)]
    (s,) = summarise(cs)
    assert s.geomean_plan_over_dp_even == pytest.approx(math.sqrt(2.0 * 8.0))  # the OOM case has no ratio
    assert s.geomean_plan_over_dp_proportional == pytest.approx(math.sqrt(2.0 * 16.0))
    assert s.median_search_s == 2.0 and s.cases == 3


def test_missing_model_is_an_input_error_before_any_work(tmp_path):
    from tag.errors import InputError

    opts = suite_options(models=["mlp", "no_such_model"], topologies=["cpu4"], datasets_dir=DATASETS)
    calls = []
    with pytest.raises(InputError, match="no_such_model"):
        run_suite(opts, lambda *a: calls.append(a))
    assert calls == []


def test_without_datasets_only_the_shipped_files_resolve(monkeypatch):
    from tag.bench import data
    from tag.errors import InputError

    monkeypatch.setattr(data, "checkout_datasets", lambda: None)  # as in a wheel install
    for m in ("vgg19", "resnet50", "gpt2_medium"):
        for t in ("heterog8", "tag16", "hap64"):
            f = data.case_files(m, t)
            assert f.model_path.read_bytes() == open(os.path.join(DATASETS, "models", f"{m}.onnx"), "rb").read()
            assert f.topology_path.exists()
    with pytest.raises(InputError, match="--datasets DIR"):
        data.case_files("dlrm", "heterog8")
    with pytest.raises(InputError, match="--datasets DIR"):
        data.case_files("vgg19", "amp16")
