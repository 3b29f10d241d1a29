"""`tag train`: train or fine-tune the search's GNN by expert iteration."""

from __future__ import annotations

import os
import shlex
import sys

from tag.cli.util import add_output_flags, add_verb, emit, progress, table
from tag.errors import InputError


def add_parser(sub):
    p = add_verb(sub, "train", "train or fine-tune the GNN that guides the search (expert iteration)",
                 "tag train --models datasets/models/mlp.onnx datasets/models/small_cnn.onnx "
                 "--topologies random:200 --minutes 20 -o my-gnn.pt",
                 description="Train the GNN on models x topologies with simulator targets: by default every "
                             "candidate of a decision point is simulated (policy target = softmax of the children's "
                             "values; value target = simulated speed); --targets visits uses MCTS visit counts "
                             "(expert iteration). --init fine-tunes a checkpoint, --profile trains on profiled costs. "
                             "--head structure trains the structure tree's network (priors over whole-plan "
                             "actions) by expert iteration on its visit counts, by default on random models x "
                             "random clusters: tag train --head structure --minutes 6 -o structure.pt")
    p.add_argument("--head", choices=("per-group", "structure"), default="per-group",
                   help="the network to train: the per-group tree's (default) or the structure tree's")
    p.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                   help="ONNX models to train on (required for the per-group head; the structure head draws "
                        "random models without it)")
    p.add_argument("--topologies", default=None, metavar="DIR|random:N",
                   help="a directory of topology .json files, one file, or random:N random clusters (required "
                        "with --models)")
    p.add_argument("--profile", default=None, metavar="F", help="profile database: train on measured op costs")
    p.add_argument("--init", default=None, metavar="CKPT", help="start from this checkpoint (fine-tuning)")
    p.add_argument("--resume", action="store_true", help="continue the run saved in -o (weights, optimizer, episodes)")
    p.add_argument("--minutes", type=float, default=20.0, metavar="M", help="time limit (default 20)")
    p.add_argument("--episodes", type=int, default=None, metavar="N", help="stop after N episodes in total")
    p.add_argument("--targets", choices=("lookahead", "visits"), default="lookahead",
                   help="policy targets: softmax of simulated child values (lookahead, default) or MCTS visit "
                        "counts (visits, expert iteration)")
    p.add_argument("--trajectories", type=int, default=2, metavar="N",
                   help="lookahead walks per episode (default 2)")
    p.add_argument("--playouts", type=int, default=None, metavar="N",
                   help="tree playouts per episode: MCTS with --targets visits (default 150), the structure "
                        "tree with --head structure (default 400)")
    p.add_argument("--groups", type=int, default=None, metavar="K", help="op groups per model (default: automatic)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of every random choice (default 0)")
    p.add_argument("-o", "--output", required=True, metavar="CKPT", help="checkpoint to write")
    add_output_flags(p)
    return p


def run(args) -> int:
    from tag.cli.util import check_outputs
    from tag.gnn.train import TrainConfig, topology_sources, train

    if args.models is not None and args.topologies is None:
        raise InputError("--topologies", "value", "a directory of topology .json files or random:N with --models",
                         "none")
    if args.head == "per-group" and args.models is None:
        raise InputError("--models", "value", "ONNX model files (the per-group head trains on given models)", "none")
    if args.playouts is None:
        args.playouts = 400 if args.head == "structure" else 150
    topo_file = args.topologies if args.topologies and os.path.isfile(args.topologies) else None
    check_outputs(args, {"output": "-o/--output"}, [*(args.models or []), args.profile, args.init, topo_file])

    for m in args.models or []:
        if not os.path.isfile(m):
            raise InputError(m, "file", "an ONNX model file", "no such file")
    for flag, v in (("--minutes", args.minutes), ("--playouts", args.playouts), ("--trajectories", args.trajectories)):
        if v is None or v <= 0:
            raise InputError(flag, "value", "a positive number", str(v))
    if args.episodes is not None and args.episodes <= 0:
        raise InputError("--episodes", "value", "a positive integer", str(args.episodes))
    dtype = None
    if args.profile:
        from tag.cost.profile_db import load
        dtype = load(args.profile).device_type
    command = "tag train " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    if args.head == "structure":
        return _run_structure(args, dtype, command)
    if args.init:
        from tag.gnn.checkpoint import read_checkpoint
        read_checkpoint(args.init)  # a bad or mismatched checkpoint fails before any work
    cfg = TrainConfig(models=list(args.models), topologies=topology_sources(args.topologies, args.seed, dtype),
                      out=args.output, minutes=args.minutes, seed=args.seed, profile=args.profile, init=args.init,
                      resume=args.resume, episodes=args.episodes, playouts=args.playouts, groups=args.groups,
                      targets=args.targets, trajectories=args.trajectories,
                      topology_spec=args.topologies, command=command)
    return _train_with_progress(args, lambda on_episode: train(cfg, progress=on_episode))


def _run_structure(args, dtype: str | None, command: str) -> int:
    """`tag train --head structure`: expert iteration of the structure network (`tag.gnn.structure_train`)."""
    from tag.gnn.structure_train import StructureTrainConfig, train_structure
    from tag.gnn.train import topology_sources

    if args.init:
        from tag.gnn.checkpoint import STRUCTURE_FORMAT, read_checkpoint
        read_checkpoint(args.init, STRUCTURE_FORMAT)  # a bad or mismatched checkpoint fails before any work
    topologies = topology_sources(args.topologies, args.seed, dtype) if args.models else []
    cfg = StructureTrainConfig(out=args.output, minutes=args.minutes, seed=args.seed, episodes=args.episodes,
                               playouts=args.playouts, models=list(args.models or []), topologies=topologies,
                               profile=args.profile, device_type=dtype, init=args.init, command=command)
    return _train_with_progress(args, lambda on_episode: train_structure(cfg, progress=on_episode))


def _train_with_progress(args, run) -> int:
    """Run `run(on_episode)` under a progress bar and print its metrics."""
    bar = progress(total=args.episodes, desc="train", unit="episode")

    def on_episode(rec: dict) -> None:
        bar.update(1)
        bar.set_postfix({k: round(v, 3) for k, v in rec.items() if isinstance(v, float)})

    try:
        metrics = run(on_episode)
    finally:
        bar.close()
    rows = [(k, v) for k, v in metrics.items()]
    emit(args, metrics, f"wrote {metrics['checkpoint']}\n" + table(rows, ["metric", "value"]))
    return 0
