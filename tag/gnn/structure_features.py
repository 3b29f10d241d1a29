"""Features of the structure tree's decision points (`tag.search.structure_tree`) for the structure network.

A decision point is (strategy, level, action names). The strategy is featurised as the per-group GNN sees a search
state (`tag.gnn.data.InstanceFeatures.state`: the op graph and the device graph with the strategy's row maps, and
`u`, whose last three entries are the critical-path estimate of the task graph, `tag.sim.critical_path`); each
action by its level and its name, read against the instance (the tree names actions after what they build,
`tag.search.structure`):

    level one-hot [7]   kind, layout, stages, micro, shard, memory, bucket
    keep, position      "keep"; the action's index in the tree's list / its length; first in the list (the lists
                        are in the order a heuristic would try them: the DP's best-estimated pipeline first)
    kind [3]            data, pipeline, placement
    layout family [12]  dp-proportional, dp-even, ps, dp-balanced, one-stage accumulation, one machine, one device
                        type, the k fastest, single-device, m-etf, m-topo, stage placement; fitted by the memory pass
    devices             share of the devices the layout uses and of their peak FLOP/s
    stages              S / n devices, log2(S) / 4 (a stage count, a pipeline or a stage placement)
    micro               log2(m) / 5, schedule one-hot gpipe / 1f1b / kfkb, k / m
    shard               every shardable group, one group; that group's share of the parameter bytes; grid degree / n;
                        a whole machine's grid; strided
    memory              the memory pass, ZeRO stage / 3, recomputation
    bucket              log2(1 + cap MiB) / 10, one bucket per group (cap 0)
"""

from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

LEVELS = ("kind", "layout", "stages", "micro", "shard", "memory", "bucket")
KIND_NAMES = ("data", "pipeline", "placement")
LAYOUT_FAMILIES = ("dp-proportional", "dp-even", "ps", "dp-balanced", "accumulation", "machine", "type", "fastest",
                   "single-device", "m-etf", "m-topo", "stages")
SCHEDULES = ("gpipe", "1f1b", "kfkb")
_PIPE = re.compile(r"pipeline-S(\d+)-m(\d+)-(gpipe|1f1b|kfkb)(\d*)")
_SHARD = re.compile(r"shard-(?:g(\d+)-)?(k(\d+)(-strided)?|m(.+))$")
ACT = "act"  # node type of the actions in a decision point's HeteroGraph: x [A, ACTION_DIM], target [A]
ACTION_DIM = len(LEVELS) + 3 + len(KIND_NAMES) + len(LAYOUT_FAMILIES) + 1 + 2 + 2 + 5 + 6 + 3 + 2


class ActionFeaturizer:
    """Action features [ACTION_DIM] of an instance: `featurize(level, names) -> [A, ACTION_DIM]` float32.

    `cluster`: the Cluster (device ids, machines, types, peak FLOP/s); `param_bytes`: per group (the shard level's
    one-group actions name the group)."""

    def __init__(self, cluster, param_bytes: Sequence[float]):
        self.n = cluster.n_devices
        peak = np.array([d.type.peak_tflops for d in cluster.devices], dtype=np.float64)
        self.total_peak = float(peak.sum()) or 1.0
        self.subsets: dict[str, tuple[int, ...]] = {}
        for d in cluster.devices:
            self.subsets.setdefault(d.machine, ())
            self.subsets[d.machine] += (d.index,)
            self.subsets.setdefault(d.type.name, ())
            self.subsets[d.type.name] += (d.index,)
        self.machine_names = {d.machine for d in cluster.devices}
        self.machine_size = {m: sum(1 for d in cluster.devices if d.machine == m) for m in self.machine_names}
        self.peak = peak
        self.fastest = list(np.argsort(-peak, kind="stable"))
        pb = np.asarray(param_bytes, dtype=np.float64)
        self.param_share = pb / pb.sum() if pb.sum() > 0 else np.zeros_like(pb)

    def featurize(self, level: str, names: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(names), ACTION_DIM), dtype=np.float32)
        for i, name in enumerate(names):
            out[i] = self.action(level, name, i, len(names))
        return out

    def _devices(self, devs) -> list[float]:
        devs = list(devs)
        return [len(devs) / self.n, float(self.peak[devs].sum()) / self.total_peak] if devs else [0.0, 0.0]

    def action(self, level: str, name: str, index: int, count: int) -> np.ndarray:
        """One action's features (module docstring)."""
        lv = [float(level == x) for x in LEVELS]
        head = [float(name == "keep"), index / max(count - 1, 1), float(index == 0)]
        kind = [float(level == "kind" and name == k) for k in KIND_NAMES]
        fam = [0.0] * len(LAYOUT_FAMILIES)
        fitted = float(name.endswith("+memory"))
        base = name[:-len("+memory")] if fitted else name
        devices, stages, micro = [0.0, 0.0], [0.0, 0.0], [0.0] * 5
        shard, memory, bucket = [0.0] * 6, [0.0] * 3, [0.0] * 2
        if level == "kind":
            devices = [1.0, 1.0]
        elif level in ("layout", "micro"):
            pipe = _PIPE.fullmatch(base)
            if base in LAYOUT_FAMILIES[:4] or base in ("single-device", "m-etf", "m-topo"):
                fam[LAYOUT_FAMILIES.index(base)] = 1.0
                devices = [1.0 / self.n, float(self.peak.max()) / self.total_peak] if base == "single-device" \
                    else [1.0, 1.0]
            elif pipe:
                s, m, sched, k = int(pipe[1]), int(pipe[2]), pipe[3], int(pipe[4] or 1)
                if s == 1:
                    fam[LAYOUT_FAMILIES.index("accumulation")] = 1.0
                stages = [s / self.n, math.log2(s) / 4]
                micro = [math.log2(m) / 5, *[float(sched == x) for x in SCHEDULES], k / m]
                devices = [1.0, 1.0]
            elif base.startswith("stages-"):
                fam[LAYOUT_FAMILIES.index("stages")] = 1.0
                s = int(base.split("-")[1])
                stages = [s / self.n, math.log2(s) / 4]
                devices = [1.0, 1.0]
            elif base.startswith("dp-fastest"):
                fam[LAYOUT_FAMILIES.index("fastest")] = 1.0
                devices = self._devices(self.fastest[:int(base[len("dp-fastest"):])])
            elif base.startswith("dp-") and base[3:] in self.subsets:
                fam[LAYOUT_FAMILIES.index("machine" if base[3:] in self.machine_names else "type")] = 1.0
                devices = self._devices(self.subsets[base[3:]])
        elif level == "stages" and name.startswith("S"):
            s = int(name[1:])
            stages = [s / self.n, math.log2(s) / 4]
        elif level == "shard" and name != "keep":
            m = _SHARD.fullmatch(name)
            if m:
                group = int(m[1]) if m[1] else None
                degree = int(m[3]) if m[3] else self.machine_size.get(m[5], 0)
                share = float(self.param_share[group]) if group is not None and group < len(self.param_share) else 1.0
                shard = [float(group is None), float(group is not None), share, degree / self.n,
                         float(m[5] is not None), float(bool(m[4]))]
        elif level == "memory" and name != "keep":
            memory = [float(name == "memory-pass"), int(name[5:]) / 3 if name.startswith("zero-") else 0.0,
                      float(name == "recompute")]
        elif level == "bucket" and name.startswith("bucket-"):
            mb = float(name[len("bucket-"):])
            bucket = [math.log2(1.0 + mb) / 10, float(mb == 0)]
        return np.array([*lv, *head, *kind, *fam, fitted, *devices, *stages, *micro, *shard, *memory, *bucket],
                        dtype=np.float32)
