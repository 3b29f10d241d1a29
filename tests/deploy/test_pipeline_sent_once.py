"""A tensor read by two groups of the next stage crosses once and still trains exactly like one device (issue 21).

bert_tiny in 6 groups: group 3's output `layer_norm_3` (the hidden state after a layer, 8,192 bytes per row) is
read by groups 4 and 5 (the next layer's projections and its residual add). Two stages on 2 gloo ranks, cut after
group 3 (stage 0: groups 0-3 on rank 0, stage 1: groups 4-5 on rank 1), m = 4 micro-batches of 4 rows: the hidden
state crosses once per micro-batch (the schedule lists it twice, into groups 4 and 5; the second is an alias), and
its two gradients are summed on rank 1 and go back once.

The reference is plain full-batch training (`_deploy_harness.reference_training`); parameters must agree at rtol
1e-4 under gpipe, 1f1b and kfkb (k = 2).
"""

from __future__ import annotations

import os

from tag.deploy.data import synthetic_batch
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage
from _deploy_harness import assert_ranks_match_reference, reference_training, run_scenarios

B, M, K_GROUPS = 16, 4, 6
MACHINES = ["m0", "m0"]
MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "bert_tiny.onnx")


def make(sc=None):
    import onnx

    from tag.deploy.onnx_torch import TorchProgram
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    graph = load_model(MODEL, batch_size=B)
    groups = [list(g.op_ids) for g in coarsen(graph, k=K_GROUPS, n_devices=2).groups]
    return graph, TorchProgram(onnx.load(MODEL), graph, seed=0), groups


def two_stage(cut: int, schedule: str, k: int) -> Strategy:
    """Groups 0..cut on device 0, the rest on device 1."""
    decs = tuple(Decision((B, 0)) if g <= cut else Decision((0, B)) for g in range(K_GROUPS))
    stages = (Stage(tuple(range(cut + 1)), (0,)), Stage(tuple(range(cut + 1, K_GROUPS)), (1,)))
    return Strategy(decs, pipeline=Pipeline(stages, M, schedule, k))


SCENARIOS = [{"name": f"cut{cut}-{schedule}", "strategy": two_stage(cut, schedule, k), "machines": MACHINES,
              "steps": 3, "optimizer": "momentum", "lr": 0.01}
             for cut, schedule, k in ((3, "gpipe", 1), (3, "1f1b", 1), (3, "kfkb", 2))]
# the same placement without micro-batches (`tag.deploy.runtime`: blocking exchanges group by group), and with
# groups 4 and 5 replicated 1:3 over both ranks: rows [4, 16) of the hidden state cross once for both, rows [0, 4)
# stay on rank 0
SCENARIOS += [{"name": name, "strategy": Strategy(decs), "machines": MACHINES, "steps": 3, "optimizer": "momentum",
               "lr": 0.01}
              for name, decs in (("placed", two_stage(3, "gpipe", 1).decisions),
                                 ("placed-uneven", tuple(Decision((B, 0)) if g <= 3 else Decision((4, 12), "ring")
                                                         for g in range(K_GROUPS))))]


def test_every_case_crosses_a_tensor_read_by_two_groups():
    from tag.deploy.pipeline_schedule import transfer_aliases
    from tag.deploy.schedule import build_schedule

    graph, _, groups = make()
    tensor, readers = "layer_norm_3", (4, 5)
    for sc in SCENARIOS:
        sched = build_schedule(graph, groups, sc["strategy"], MACHINES, nproc=2)
        into = {c: [k for k, tr in enumerate(sched.transfers[c]) if tr.tensor == tensor] for c in readers}
        assert all(len(ks) == 1 for ks in into.values()), into  # listed once per reader group
        lo, hi = readers
        alias = transfer_aliases(sched.transfers)
        assert alias[lo][into[lo][0]] is None  # the lower reader's message moves
        assert alias[hi][into[hi][0]] == (lo, into[lo][0])  # the higher reads it
        moved = [tr for c, lst in enumerate(sched.transfers) for k, tr in enumerate(lst) if alias[c][k] is None]
        assert len(moved) == sum(map(len, sched.transfers)) - 1  # exactly one message fewer per micro-batch


def test_two_stages_on_two_ranks_equal_one_device(tmp_path):
    results = run_scenarios(2, SCENARIOS, make, str(tmp_path))
    graph, program, _ = make()
    data, targets = synthetic_batch(graph, B, 0)
    ref_losses, ref_params = reference_training(graph, program, data, targets, 3, "momentum", 0.01)
    for sc in SCENARIOS:
        assert_ranks_match_reference(results[sc["name"]], ref_losses, ref_params, sc["name"])
    assert ref_losses[-1] < ref_losses[0]
