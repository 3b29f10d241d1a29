"""Memory-feasible starts: cut arithmetic by hand, a tape layout worked out by hand, and a case where every
baseline runs out of memory but a two-stage pipeline fits (memory worked out by hand), which plan() must find."""

from tag.graph.groups import Group, GroupEdge, GroupGraph
from tag.graph.opgraph import Op, OpGraph
from tag.search.planner import plan
from tag.search.starts import contiguous_blocks, contiguous_cuts, fill_cuts, pipeline_starts, stage_fits, tape_start
from tag.sim import simulate
from tag.strategy import TrainingConfig
from tag.topology import parse_topology

V100_USABLE = 16e9 * 0.92  # DESIGN.md: usable = 0.92 x memory_gb


class FlatCost:
    """fwd = rows x per_row_ms / (peak / 10), bwd = 2 x fwd, update = param bytes / 200 GB/s (ms)."""

    name = "test"

    def __init__(self, gg, per_row_ms=1.0):
        self.gg, self.per_row = gg, per_row_ms

    def group_fwd_ms(self, g, device, rows):
        return self.per_row * rows / (device.peak_tflops / 10.0)

    def group_bwd_ms(self, g, device, rows):
        return 2 * self.group_fwd_ms(g, device, rows)

    def update_ms(self, g, device):
        return self.gg.groups[g].param_bytes / 2e8


def make_case(n_groups, param_bytes, saved_per_row, batch, machines=2, per_machine=2, edge_bytes_per_row=1e6):
    cluster = parse_topology({"version": 1, "machines": [
        {"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": per_machine}], "nic_bandwidth_gbps": 100}
        for i in range(machines)]}, "case.json")
    ops = [Op(f"op{g}", "MatMul", "", [], [], op_class="matmul") for g in range(n_groups)]
    graph = OpGraph("case.onnx", ops, {}, [], [], [], 1, batch)
    groups = [Group(id=g, op_ids=[g], splittable=True, param_bytes=param_bytes, param_count=int(param_bytes // 4),
                    saved_bytes_per_row=saved_per_row, params=[f"w{g}"] if param_bytes else [])
              for g in range(n_groups)]
    edges = [GroupEdge(g, g + 1, [f"t{g}"], edge_bytes_per_row, 0.0) for g in range(n_groups - 1)]
    gg = GroupGraph(graph, groups, edges)
    return gg, cluster, FlatCost(gg)


def test_contiguous_cuts_follow_capacity_shares():
    assert contiguous_cuts([1, 1, 1, 1], [1, 1]) == [0, 2, 4]
    assert contiguous_cuts([1, 1, 1, 1, 1, 1], [1, 2]) == [0, 2, 6]  # a third of the demand to a third of the room
    assert contiguous_cuts([3, 1, 1, 1], [1, 1]) == [0, 1, 4]  # half of 6 is 3: the first item alone
    assert contiguous_cuts([5, 1], [1, 1, 1]) is None  # fewer items than blocks
    assert contiguous_cuts([0, 0, 9], [1, 1, 1]) == [0, 1, 2, 3]  # every run non-empty
    assert contiguous_blocks([2, 2, 2, 2, 2, 2], 3) == [[0, 1], [2, 3], [4, 5]]


def test_tape_layout_by_hand():
    # no parameters, 1e9 saved bytes per row, inputs and outputs not counted (into_weight 0); fill 0.75 of a
    # V100 = 11.04e9 bytes -> 11 rows a device. Group 0: 11 on d0, 5 on d1 (d1 keeps 6.04e9); group 1: 6 on
    # d1, the other 10 on d2. A third group would need 16 rows on d2 (1 left) and d3 (11): too few.
    gg, cluster, _ = make_case(2, 0.0, 1e9, 16)
    s = tape_start(gg, cluster, TrainingConfig(), 16, 0.75, into_weight=0.0)
    assert [d.rows for d in s.decisions] == [(11, 5, 0, 0), (0, 6, 10, 0)]
    assert [d.sync for d in s.decisions] == [None, None]  # no parameters: nothing to sync
    gg3, cluster3, _ = make_case(3, 0.0, 1e9, 16)
    assert tape_start(gg3, cluster3, TrainingConfig(), 16, 0.75, into_weight=0.0) is None


def _all_oom_case():
    # Two groups of 2.4e9 parameter bytes (Adam: weights + 2 states = 7.2e9 static, + 2.4e9 gradients) and
    # 0.5e9 saved bytes per row at batch 16. One group whole on one device: 9.6e9 + 8e9 = 17.6e9 > 14.72e9.
    # Both groups on a device (any data parallelism): 19.2e9 static alone. A stage of one group over one
    # machine's two devices at 8 rows each: 9.6e9 + 4e9 (+ 8e6 received) = 13.6e9 < 14.72e9, so the
    # two-stage pipeline fits.
    return make_case(2, 2.4e9, 0.5e9, 16)


def test_stage_fits_matches_hand_memory():
    gg, cluster, _ = _all_oom_case()
    t = TrainingConfig()
    assert stage_fits(gg, cluster, t, 16, [0], [0, 1])
    assert not stage_fits(gg, cluster, t, 16, [0], [0])  # 17.6e9 on one device
    assert not stage_fits(gg, cluster, t, 16, [0, 1], [0, 1, 2, 3])  # 19.2e9 static
    assert fill_cuts(gg, cluster, t, 16, [[0, 1], [2, 3]]) == [0, 1, 2]


def test_pipeline_start_fits_when_every_baseline_is_oom():
    gg, cluster, cost = _all_oom_case()
    training = TrainingConfig()
    starts = dict(pipeline_starts(gg, cluster, cost, training, 16))
    two = [s for name, s in starts.items() if name.startswith("pipeline-2-")]
    assert two, sorted(starts)
    rows = [d.rows for d in two[0].decisions]
    assert rows == [(8, 8, 0, 0), (0, 0, 8, 8)]  # equal devices: equal rows inside each stage
    r = simulate(gg, cluster, cost, two[0], training)
    assert not r.oom and max(r.peak_memory_gb.values()) * 1e9 < V100_USABLE

    res = plan(gg, cluster, cost, training, playouts=30, budget_s=120, seed=0, sfb=False)
    assert all(br.oom for _, br in res.baselines.values())
    assert res.best_baseline is None
    assert res.start.startswith("pipeline-")  # the search started from a fitting pipeline, not an OOM baseline
    assert not res.result.oom
    assert max(res.result.peak_memory_gb.values()) * 1e9 <= V100_USABLE
