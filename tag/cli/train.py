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
                             "(expert iteration). --init fine-tunes a checkpoint, --profile trains on profiled costs.")
    p.add_argument("--models", nargs="+", required=True, metavar="MODEL", help="ONNX models to train on")
    p.add_argument("--topologies", required=True, metavar="DIR|random:N",
                   help="a directory of topology .json files, one file, or random:N random clusters")
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
    p.add_argument("--playouts", type=int, default=150, metavar="N",
                   help="MCTS playouts per episode with --targets visits (default 150)")
    p.add_argument("--groups", type=int, default=None, metavar="K", help="op groups per model (default: automatic)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of every random choice (default 0)")
    p.add_argument("-o", "--output", required=True, metavar="CKPT", help="checkpoint to write")
    add_output_flags(p)
    return p


def run(args) -> int:
    from tag.cli.util import check_outputs
    from tag.gnn.train import TrainConfig, topology_sources, train

    topo_file = args.topologies if os.path.isfile(args.topologies) else None
    check_outputs(args, {"output": "-o/--output"}, [*args.models, args.profile, args.init, topo_file])

    for m in args.models:
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
    if args.init:
        from tag.gnn.checkpoint import read_checkpoint
        read_checkpoint(args.init)  # a bad or mismatched checkpoint fails before any work
    cfg = TrainConfig(models=list(args.models), topologies=topology_sources(args.topologies, args.seed, dtype),
                      out=args.output, minutes=args.minutes, seed=args.seed, profile=args.profile, init=args.init,
                      resume=args.resume, episodes=args.episodes, playouts=args.playouts, groups=args.groups,
                      targets=args.targets, trajectories=args.trajectories,
                      topology_spec=args.topologies, command="tag train " + " ".join(shlex.quote(a) for a in sys.argv[2:]))
    bar = progress(total=args.episodes, desc="train", unit="episode")

    def on_episode(rec: dict) -> None:
        bar.update(1)
        bar.set_postfix({k: round(v, 3) for k, v in rec.items() if isinstance(v, float)})

    try:
        metrics = train(cfg, progress=on_episode)
    finally:
        bar.close()
    rows = [(k, v) for k, v in metrics.items()]
    emit(args, metrics, f"wrote {metrics['checkpoint']}\n" + table(rows, ["metric", "value"]))
    return 0
