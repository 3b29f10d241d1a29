"""`tag inspect MODEL.onnx | TOPOLOGY.json`: summarise a model (ops, groups) or a cluster."""

from __future__ import annotations

from tag.cli.util import add_model_flags, add_output_flags, add_verb


def add_parser(sub):
    p = add_verb(sub, "inspect", "summarise a model (.onnx) or a cluster (.json)",
                 "tag inspect datasets/models/resnet50.onnx --groups 24\n  tag inspect datasets/topologies/heterog8.json --json")
    p.add_argument("path", help="a model .onnx or a topology .json")
    p.add_argument("--groups", type=int, default=None, metavar="K", help="number of op groups to show (models)")
    p.add_argument("--devices", type=int, default=1, metavar="N",
                   help="devices the batch default and group count assume (models; default 1)")
    add_model_flags(p)
    add_output_flags(p)
    return p


def run(args) -> int:
    if str(args.path).lower().endswith(".json"):
        from tag.cli._inspect_topology import run_topology
        return run_topology(args)
    from tag.cli._inspect_model import run_model
    return run_model(args)
