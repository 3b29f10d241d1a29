"""`tag plan` with both networks, and `tag train` of both heads, never import torch_geometric (issue 24 must-show 4:
~2 s of every plan went to importing it); plans are the same whether or not it is importable. `tag plan` does not
import torch either: it evaluates both networks in numpy (`tag.gnn.infer`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MLP = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
TOPO = os.path.join(ROOT, "datasets", "topologies", "heterog8.json")

# Runs `tag ARGS` in a fresh interpreter (argv[2:]); with "block" in argv[1], torch_geometric cannot be imported at
# all. Reports on stderr's last line: the exit code, the torch_geometric modules loaded, which networks loaded.
SCRIPT = """
import json, sys
if sys.argv[1] == "block":
    sys.modules["torch_geometric"] = None
from tag.cli import main
rc = main(sys.argv[2:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "torch_geometric" and sys.modules[m] is not None)
print(json.dumps({"rc": rc, "pyg": loaded, "structure": "tag.gnn.structure_model" in sys.modules,
                  "per_group": "tag.gnn.model" in sys.modules, "torch": "torch" in sys.modules,
                  "numpy_nets": "tag.gnn.infer" in sys.modules}), file=sys.stderr)
"""


def _tag(mode: str, args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode, *args], capture_output=True, text=True, cwd=ROOT)
    return json.loads(proc.stderr.strip().splitlines()[-1])


def test_plan_with_both_networks_never_imports_torch_geometric(tmp_path):
    def plan(mode):
        out = tmp_path / f"{mode}.json"
        report = _tag(mode, ["plan", MLP, TOPO, "-o", str(out), "--playouts", "8", "--simulations", "40", "--no-sfb",
                             "--json"])
        return report, json.loads(out.read_text())

    report, plan_free = plan("free")
    assert report == {"rc": 0, "pyg": [], "structure": False, "per_group": False, "torch": False, "numpy_nets": True}
    assert plan_free["search"]["gnn"] is not None and plan_free["search"]["structure"]["priors"] is not None
    blocked, plan_blocked = plan("block")
    assert blocked["rc"] == 0 and blocked["numpy_nets"] and not blocked["torch"]
    for p in (plan_free, plan_blocked):
        p["search"].pop("seconds")
    assert plan_free == plan_blocked


@pytest.mark.parametrize("head", ["per-group", "structure"])
def test_training_either_head_runs_without_torch_geometric(tmp_path, head):
    topo = tmp_path / "two.json"
    topo.write_text(json.dumps({"version": 1, "machines": [{"name": "m0", "devices": [{"type": "T4-16GB", "count": 2}]}]}))
    out = tmp_path / "net.pt"
    report = _tag("block", ["train", "--head", head, "--models", MLP, "--topologies", str(topo), "--playouts", "12",
                            "--groups", "3", "--episodes", "1", "-o", str(out), "--json"])
    assert report["rc"] == 0 and report["pyg"] == [] and out.exists()
