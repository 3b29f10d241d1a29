"""`tag plan --profile` on a topology measured by `tag profile links` uses the measured ring rate."""

from __future__ import annotations

import json
import os

import pytest

from tag.cost.profile_db import OpProfile, ProfileDB, op_signature, save
from tag.modelio import ModelOptions, load_inputs

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MLP = os.path.join(ROOT, "datasets", "models", "mlp.onnx")


def _files(tmp_path, measured: dict | None):
    from tag.graph import load_model
    graph = load_model(MLP, n_devices=2)
    ops = {op_signature(op, graph): OpProfile([1, 64], [0.02, 0.8], [0.04, 1.6])
           for op in graph.ops if op.fwd_flops_per_row > 0}
    profile = str(tmp_path / "cpu.json")
    save(ProfileDB("cpu", 1, {"cpu": "test"}, ops), profile)
    topo = {"version": 1, "name": "box", "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 2}]}]}
    if measured is not None:
        topo["x-measured"] = measured
    path = tmp_path / "box.json"
    path.write_text(json.dumps(topo))
    return profile, str(path)


def _args(profile):
    return ModelOptions(profile=profile, optimizer="adam")


def test_measured_ring_rate_reaches_the_profiled_cost_model(tmp_path):
    # 2-rank ring: t = 2 alpha + S / B with B = 8 Gbit/s = 1e6 bytes/ms, alpha = 0.05 ms, on sizes >= 1 MiB
    sizes = [1 << 20, 1 << 22, 1 << 24]
    measured = {"sizes_bytes": sizes, "allreduce_ms": [0.1 + s / 1e6 for s in sizes],
                "fits": {"allreduce": {"ranks": 2, "hop_bandwidth_gbps": 1.0}}}
    profile, topo = _files(tmp_path, measured)
    before = open(topo).read()
    inp = load_inputs(MLP, topo, _args(profile))
    dev = inp.cluster.devices[0].type
    assert inp.cost.collective_hop_gbps(dev, 2) == pytest.approx(8.0, rel=1e-6)
    assert open(topo).read() == before  # input files are never modified


def test_hand_written_topology_and_roofline_keep_the_link_rate(tmp_path):
    profile, topo = _files(tmp_path, None)
    inp = load_inputs(MLP, topo, _args(profile))
    assert inp.cost.collective_hop_gbps(inp.cluster.devices[0].type, 2) is None
    roof = load_inputs(MLP, topo, _args(None))
    assert not hasattr(roof.cost, "collective_hop_gbps") or roof.cost.collective_hop_gbps(
        roof.cluster.devices[0].type, 2) is None
