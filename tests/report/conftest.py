import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from tag.cli import main  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(ROOT, "datasets/models/mlp.onnx")
RESNET_TINY = os.path.join(ROOT, "datasets/models/resnet_tiny.onnx")
CPU4 = os.path.join(ROOT, "datasets/topologies/cpu4.json")
HETEROG8 = os.path.join(ROOT, "datasets/topologies/heterog8.json")


def gpu512_topology(path: str) -> str:
    """64 machines x 8 identical V100s behind one switch."""
    topo = {"version": 1, "name": "gpu512",
            "machines": [{"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": 8}],
                          "intra_bandwidth_gbps": 128, "nic_bandwidth_gbps": 100} for i in range(64)]}
    with open(path, "w") as f:
        json.dump(topo, f)
    return path


@pytest.fixture(scope="session")
def hetero_case(tmp_path_factory):
    """A searched plan of resnet_tiny on heterog8 (few playouts, no GNN) and its report: (plan, model, topo, html)."""
    d = tmp_path_factory.mktemp("hetero")
    plan, html = str(d / "plan.json"), str(d / "report.html")
    assert main(["plan", RESNET_TINY, HETEROG8, "--playouts", "4", "--no-gnn", "-o", plan, "--json"]) == 0
    assert main(["report", plan, RESNET_TINY, HETEROG8, "-o", html]) == 0
    return plan, RESNET_TINY, HETEROG8, html
