"""Hand-built FC models, clusters and a fixed-time cost model for the SFB tests."""

from __future__ import annotations

from tag.cost.efficiency import EfficiencyParams
from tag.graph.groups import Group, GroupEdge, GroupGraph
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.topology import parse_topology

TRAINING = TrainingConfig(optimizer="sgd")
PEAK_TFLOPS = 10.0  # 1e10 FLOP per ms
MEM_GBPS = 8000.0  # 1e6 bytes per ms


def cluster(machines: int, per_machine: int = 1, link_gbps: float = 1.0, link_us: float = 10.0,
            intra_gbps: float = 128.0):
    """`machines` machines of `per_machine` devices; machines in a ring of direct links (or one link for 2)."""
    ms = [{"name": f"m{i}", "devices": [{"type": "G", "count": per_machine}], "intra_bandwidth_gbps": intra_gbps,
           "nic_bandwidth_gbps": link_gbps} for i in range(machines)]
    obj = {"version": 1, "device_types": {"G": {"peak_tflops": PEAK_TFLOPS, "memory_gb": 64,
                                                "memory_bandwidth_gbps": MEM_GBPS}}, "machines": ms}
    if machines == 2:
        obj["links"] = [{"between": ["m0", "m1"], "bandwidth_gbps": link_gbps, "latency_us": link_us}]
    return parse_topology(obj, "sfbkit")


def fc_model(layers: list[tuple[int, int]], batch: int, groups: list[list[int]] | None = None,
             extra_params: list[int] | None = None, seq: int = 0) -> GroupGraph:
    """A chain of Gemm layers x_{i+1} = x_i W_i (W_i of shape K_i x N_i, fp32); `groups` lists layer
    indices per group (default one per layer); `extra_params[g]` adds a non-SFB parameter of that many
    bytes to group g (a conv-like weight that always stays in the all-reduce).

    seq > 0: transformer-style Linear layers as torch exports them: W_i stored N_i x K_i, a Transpose op
    t{i} makes W_i^T (a parameter-role tensor), and MatMul fc{i} multiplies the 3-D activation
    [batch, seq, K_i] by it."""
    groups = groups or [[i] for i in range(len(layers))]
    ops, tensors = [], {}
    op_of: list[list[int]] = []

    def act(k):
        return (batch, seq, k) if seq else (batch, k)

    for i, (k, n) in enumerate(layers):
        xi, wi, yi = f"x{i}", f"W{i}", f"x{i + 1}"
        prod = None if i == 0 else len(ops) - 1
        tensors.setdefault(xi, TensorInfo(xi, "float32", act(k), 0, "data" if i == 0 else "activation", prod, []))
        ids = []
        if seq:
            tensors[wi] = TensorInfo(wi, "float32", (n, k), None, "param", None, [len(ops)])
            tensors[f"{wi}t"] = TensorInfo(f"{wi}t", "float32", (k, n), None, "param", len(ops), [len(ops) + 1])
            ids.append(len(ops))
            ops.append(Op(f"t{i}", "Transpose", "", [wi], [f"{wi}t"], attrs={"perm": [1, 0]},
                          is_weight_generator=True))
            w_in = f"{wi}t"
        else:
            tensors[wi] = TensorInfo(wi, "float32", (k, n), None, "param", None, [len(ops)])
            w_in = wi
        tensors[xi].consumers.append(len(ops))
        tensors[yi] = TensorInfo(yi, "float32", act(n), 0, "activation", len(ops), [])
        ids.append(len(ops))
        ops.append(Op(f"fc{i}", "MatMul" if seq else "Gemm", "", [xi, w_in], [yi], op_class="matmul", params=[wi],
                      param_count=k * n, param_bytes=4.0 * k * n))
        op_of.append(ids)
    graph = OpGraph("fc.onnx", ops, tensors, ["x0"], [f"W{i}" for i in range(len(layers))], [f"x{len(layers)}"],
                    batch, batch)
    gs, edges = [], []
    for g, ids in enumerate(groups):
        extra = (extra_params or [0] * len(groups))[g]
        pc = sum(layers[i][0] * layers[i][1] for i in ids) + extra // 4
        gs.append(Group(g, [j for i in ids for j in op_of[i]], True, param_count=pc, param_bytes=4.0 * pc,
                        params=[f"W{i}" for i in ids]))
        if g:
            k_in = layers[ids[0]][0] * max(seq, 1)
            edges.append(GroupEdge(g - 1, g, [f"x{ids[0]}"], 4.0 * k_in, 0.0))
    return GroupGraph(graph, gs, edges)


class FixedCost:
    """fwd = fwd_ms_per_row[g] x rows, bwd = bwd_ms_per_row[g] x rows, update = upd_ms; dW products by a
    roofline at full matmul efficiency and no launch cost (`params_for`)."""

    name = "fixed"

    def __init__(self, fwd_ms_per_row, bwd_ms_per_row, upd_ms=0.0):
        self.f, self.b, self.u = list(fwd_ms_per_row), list(bwd_ms_per_row), upd_ms

    def group_fwd_ms(self, g, device, rows):
        return self.f[g] * rows

    def group_bwd_ms(self, g, device, rows):
        return self.b[g] * rows

    def update_ms(self, g, device):
        return self.u

    def params_for(self, kind):
        return EfficiencyParams(base={"matmul": 1.0}, floor=0.01, mem_efficiency=1.0, launch_us=0.0)


def dp(n_groups: int, rows: list[int], sync: str | None = "allreduce", sfb: list[tuple[str, ...]] | None = None) -> Strategy:
    """Every group data-parallel with the same row map."""
    sfb = sfb or [()] * n_groups
    return Strategy(tuple(Decision(tuple(rows), sync, None, sfb[g]) for g in range(n_groups)))


def random_instance(seed: int, max_ops: int = 9, seq: int = 0):
    """A random FC chain (1-3 Gemm layers per group, at most `max_ops`), cluster, cost and data-parallel
    strategy (some groups on a random subset of devices, rows split round-robin), all from `seed`; with
    seq > 0 the layers are Transpose->MatMul Linears on [batch, seq, K] activations (`fc_model`)."""
    import random

    rng = random.Random(seed)
    per = [rng.randint(1, 3) for _ in range(rng.randint(2, 5))]
    while sum(per) > max_ops:
        per[per.index(max(per))] -= 1
    dims = [rng.choice([256, 512, 1024, 2048, 4096]) for _ in range(sum(per) + 1)]
    groups, i = [], 0
    for p in per:
        groups.append(list(range(i, i + p)))
        i += p
    batch = rng.choice([8, 16, 32, 64, 128])
    cl = cluster(rng.choice([2, 3, 4]), rng.choice([1, 2]), link_gbps=rng.choice([1.0, 10.0, 25.0, 100.0]))
    gg = fc_model(list(zip(dims, dims[1:])), batch, groups, [rng.choice([0, 0, 4_000_000, 16_000_000]) for _ in groups],
                  seq=seq)
    fwd = [rng.uniform(0.001, 0.05) for _ in groups]
    cost = FixedCost(fwd, [f * rng.uniform(1.5, 3) for f in fwd], upd_ms=rng.uniform(0, 0.5))
    n = cl.n_devices
    decs = []
    for _ in groups:
        devs = sorted(rng.sample(range(n), rng.randint(2, n))) if rng.random() < 0.3 else list(range(n))
        rows = [0] * n
        for j in range(batch):
            rows[devs[j % len(devs)]] += 1
        decs.append(Decision(tuple(rows), "allreduce", None, ()))
    return gg, cl, cost, Strategy(tuple(decs))
