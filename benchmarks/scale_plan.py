"""Data parallelism at scale: predicted scaling on 512 P100s, and `tag plan` / `tag simulate` on 1,024 GPUs.

Run: python benchmarks/scale_plan.py [--plan]

1. Writes a 128-machine x 4 P100-16GB cluster with 25 Gb/s NICs behind one switch (the Horovod paper's cluster
   shape) to a temporary file and simulates dp-even and dp-proportional at 64 rows per GPU (batch 32,768) and
   single-device at 64, for Inception-v3, ResNet-101 and VGG-19 (momentum SGD). Scaling efficiency =
   single-device ms / data-parallel ms (both at 64 rows per GPU).
2. With --plan: times `tag plan datasets/models/resnet50.onnx datasets/topologies/mixed1024.json --batch-size 65536
   --optimizer momentum` and `tag simulate ... --baseline dp-even` as whole processes (wall and CPU seconds), and
   prints the plan's line count, playouts, simulations and its speedups.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plan_time import run_tag as _tag  # noqa: E402  (`tag ARGS` as a process: wall s, CPU s, the completed process)
MODELS = ("inception_v3", "resnet101", "vgg19")


def p100_cluster(path: str, machines: int = 128) -> None:
    ms = [{"name": f"m{i}", "devices": [{"type": "P100-16GB", "count": 4}], "nic_bandwidth_gbps": 25}
          for i in range(machines)]
    with open(path, "w") as f:
        json.dump({"version": 1, "name": f"p100x{4 * machines}", "machines": ms}, f)


def scaling_rows(topo: str) -> list[list]:
    rows = []
    for m in MODELS:
        model = os.path.join("datasets", "models", f"{m}.onnx")
        ms = {}
        for name, batch in (("single-device", 64), ("dp-even", 32768), ("dp-proportional", 32768)):
            _, _, p = _tag(["simulate", model, topo, "--baseline", name, "--batch-size", str(batch),
                            "--optimizer", "momentum", "--json"])
            ms[name] = json.loads(p.stdout)["iteration_ms"]
        rows.append([m, f"{ms['single-device']:.1f}", f"{ms['dp-even']:.1f}", f"{ms['dp-proportional']:.1f}",
                     f"{100 * ms['single-device'] / ms['dp-even']:.1f}%",
                     f"{abs(ms['dp-even'] / ms['dp-proportional'] - 1) * 100:.2f}%"])
    return rows


def plan_rows() -> list[list]:
    model, topo = "datasets/models/resnet50.onnx", "datasets/topologies/mixed1024.json"
    common = ["--batch-size", "65536", "--optimizer", "momentum"]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        wall, cpu, p = _tag(["plan", model, topo, *common, "-o", plan_path])
        plan = json.load(open(plan_path))
        lines = len(p.stdout.splitlines())
        s, b = plan["search"], plan["baselines"]
        it = plan["predicted"]["iteration_ms"]
        out.append(["tag plan", f"{wall:.0f}", f"{cpu:.0f}", lines,
                    f"{s['playouts']} playouts, {s['simulations']} simulations; "
                    f"{b['dp-even']['iteration_ms'] / it:.2f}x dp-even, {b['dp-proportional']['iteration_ms'] / it:.2f}x dp-prop"])
        wall, cpu, p = _tag(["simulate", model, topo, *common, "--baseline", "dp-even"])
        out.append(["tag simulate --baseline dp-even", f"{wall:.1f}", f"{cpu:.1f}", len(p.stdout.splitlines()), ""])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", action="store_true", help="also time tag plan / simulate on mixed1024 (minutes)")
    args = ap.parse_args(argv)
    from tag.textfmt import table

    with tempfile.TemporaryDirectory() as tmp:
        topo = os.path.join(tmp, "p100x512.json")
        p100_cluster(topo)
        print("512 x P100-16GB (128 machines x 4, 25 Gb/s NICs), 64 rows per GPU, momentum SGD")
        print(table(scaling_rows(topo), ["model", "1 GPU ms", "dp-even ms", "dp-prop ms", "scaling", "even vs prop"]))
    if args.plan:
        print("\nmixed1024 (512 V100 + 512 A100, 16 racks, 4:1 spine), resnet50 at batch 65,536")
        print(table(plan_rows(), ["command", "wall s", "CPU s", "lines printed", "search"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
