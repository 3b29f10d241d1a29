"""`tag plan` with both networks never imports torch_geometric (issue 24 must-show 4: ~2 s of every plan went to
importing it), and plans the same whether or not it is importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
TOPO = os.path.join(ROOT, "datasets", "topologies", "heterog8.json")

# Runs `tag plan` in a fresh interpreter; with "block" first, torch_geometric cannot be imported at all
SCRIPT = """
import json, sys
if sys.argv[1] == "block":
    sys.modules["torch_geometric"] = None
from tag.cli import main
rc = main(["plan", sys.argv[2], sys.argv[3], "-o", sys.argv[4], "--playouts", "8", "--simulations", "40",
           "--no-sfb", "--json"])
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "torch_geometric" and sys.modules[m] is not None)
print(json.dumps({"rc": rc, "pyg": loaded, "structure": "tag.gnn.structure_model" in sys.modules,
                  "per_group": "tag.gnn.model" in sys.modules}), file=sys.stderr)
"""


def _plan(tmp_path, mode: str) -> tuple[dict, dict]:
    out = tmp_path / f"{mode}.json"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode, MODEL, TOPO, str(out)], capture_output=True,
                          text=True, cwd=ROOT)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report, json.loads(out.read_text())


def test_plan_with_both_networks_never_imports_torch_geometric(tmp_path):
    report, plan = _plan(tmp_path, "free")
    assert report == {"rc": 0, "pyg": [], "structure": True, "per_group": True}
    assert plan["search"]["gnn"] is not None
    blocked, plan_blocked = _plan(tmp_path, "block")
    assert blocked["rc"] == 0 and blocked["structure"] and blocked["per_group"]
    for p in (plan, plan_blocked):
        p["search"].pop("seconds")
    assert plan == plan_blocked
