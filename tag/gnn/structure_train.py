"""Training the structure network by expert iteration (`tag train --head structure`).

Episode e (every random choice from `np.random.default_rng([seed, e])`): one instance, a random model on a random
cluster (`structure_selfplay.random_instance`, seeds SEED_BASE + e), or with `models` a drawn model file on a drawn
topology (fine-tuning on a profile: the user's models on clusters of the profiled device type). The structure tree
runs `playouts` playouts from `plan()`'s start: with uniform priors for the first `warmup` episodes, then with the
current network's priors (Dirichlet noise `noise` mixed in): the expert is the tree, the apprentice the network,
and the next search uses the apprentice. Its decision points join a replay buffer (`structure_selfplay.tree_samples`:
visit distributions and best-found values), and `steps_per_episode` Adam steps on minibatches of the buffer follow

    loss = -sum_a target_a log p_a / points + Huber(value, target value)

Before they join, the network is scored on the episode's points (policy cross-entropy, and top-1: its highest-prior
action is the most visited): a running measure on instances it has not trained on yet. The encoder starts from
the shipped per-group network's (`checkpoint.SHIPPED_NAME`) unless `init` gives a structure checkpoint.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from tag.gnn.graph import batch_graphs
from tag.errors import InputError
from tag.gnn.checkpoint import STRUCTURE_FORMAT, default_checkpoint, load_checkpoint, read_checkpoint, save_checkpoint
from tag.gnn.structure_model import ACT, StructureNet, action_log_probs
from tag.gnn.structure_priors import make_structure_priors_fn
from tag.gnn.train import _mean, gradient_steps


@dataclass
class StructureTrainConfig:
    out: str
    minutes: float = 8.0
    seed: int = 0
    episodes: int | None = None  # stop after this many episodes (None: only the time limit)
    playouts: int = 400
    warmup: int = 8  # episodes searched with uniform priors before the network's
    models: list[str] = field(default_factory=list)  # [] = random models (structure_selfplay.random_instance)
    topologies: list = field(default_factory=list)  # with models: paths or ("random", seed, type) sources
    profile: str | None = None
    device_type: str | None = None  # random clusters of this catalog type (the profiled device's)
    init: str | None = None  # a structure checkpoint to fine-tune
    noise: float = 0.25
    steps_per_episode: int = 16
    batch: int = 32
    lr: float = 1e-3
    buffer: int = 4000
    command: str = ""


def losses(net: StructureNet, points: list) -> tuple[torch.Tensor, torch.Tensor]:
    """(policy cross-entropy to the visit distributions, value Huber loss) over a list of points."""
    b = batch_graphs(points)
    logits, value = net(b)
    lp = -(b[ACT].target * action_log_probs(b, logits)).sum() / len(points)
    return lp, torch.nn.functional.smooth_l1_loss(value, b.value, beta=0.5)


def top1_agreement(net: StructureNet, points: list) -> float:
    """Share of points whose highest-prior action is (one of) the most visited."""
    hits = 0
    with torch.no_grad():
        for p in points:
            logits, _ = net(p)
            t = p[ACT].target
            hits += int(t[int(torch.argmax(logits))] >= t.max() - 1e-9)
    return hits / max(len(points), 1)


def new_network() -> StructureNet:
    """A StructureNet (default shape: the shipped per-group network's) whose encoder holds the shipped per-group
    network's weights."""
    net = StructureNet()
    shipped = default_checkpoint()
    if shipped:
        obj = read_checkpoint(shipped)
        mine = net.encoder_state_dict()
        take = {k: v for k, v in obj["model"].items() if k in mine and mine[k].shape == v.shape}
        net.gnn.load_state_dict(take, strict=False)
    return net


def train_structure(cfg: StructureTrainConfig, progress=None) -> dict:
    """Expert iteration (module docstring) until `minutes` or `episodes`; writes `cfg.out` and its card."""
    from tag.gnn.structure_selfplay import SEED_BASE, random_instance, start_tree, tree_samples
    from tag.gnn.train import _file_sha, load_cluster, load_instance
    from tag.strategy import TrainingConfig

    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    start = time.monotonic()
    net = load_checkpoint(cfg.init, STRUCTURE_FORMAT)[0] if cfg.init else new_network()
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    training = TrainingConfig()
    buf: list = []
    history: list = []
    steps = 0
    cache: dict = {}
    card_data = {
        "models": ([{"file": os.path.basename(m), "sha256_16": _file_sha(m)} for m in cfg.models] if cfg.models
                   else f"random models, seeds {SEED_BASE} + episode (tag.gnn.random_models)"),
        "topologies": ([str(t) for t in cfg.topologies] if cfg.models
                       else f"random clusters, seeds {SEED_BASE} + episode (<= 4 machines x 4 devices)"),
        "profile": os.path.basename(cfg.profile) if cfg.profile else None,
        "cost_model": "profile" if cfg.profile else "roofline",
        "targets": "structure tree visit distributions; value: best plan found below the node",
        "playouts_per_episode": cfg.playouts, "warmup_uniform_episodes": cfg.warmup,
        "init": os.path.basename(cfg.init) if cfg.init else "encoder of " + str(os.path.basename(
            default_checkpoint() or "none")),
    }
    with tempfile.TemporaryDirectory(prefix="tag-structure-") as tmp:
        ep = 0
        while (cfg.episodes is None or ep < cfg.episodes) and time.monotonic() - start < cfg.minutes * 60:
            rng = np.random.default_rng([cfg.seed, ep])
            rec: dict = {"episode": ep}
            try:
                if cfg.models:
                    model = cfg.models[int(rng.integers(len(cfg.models)))]
                    topo = cfg.topologies[int(rng.integers(len(cfg.topologies)))]
                    inst = load_instance(model, load_cluster(topo), training, profile=cfg.profile, graph_cache=cache)
                    gg, cluster, cost, name = inst.gg, inst.cluster, inst.cost, inst.name
                else:
                    gg, cluster, cost, name = random_instance(ep, tmp, training, profile=cfg.profile,
                                                                      device_type=cfg.device_type)
                rec["instance"] = name
                net.eval()
                run = start_tree(gg, cluster, cost, training, seed=int(rng.integers(2**31)), name=name)
                if ep >= cfg.warmup or cfg.init:
                    run.tree.priors_fn = make_structure_priors_fn(net, run.points, noise=cfg.noise, rng=rng)
                run.tree.run(cfg.playouts)
                points = tree_samples(run)
            except InputError:
                raise
            except Exception as e:  # a failing instance must not end a long run; the card counts them
                rec["error"] = f"{type(e).__name__}: {str(e)[:120]}"
                points = []
            if points:
                with torch.no_grad():
                    rec["policy_ce"] = float(losses(net, points)[0])
                rec["top1"] = top1_agreement(net, points)
                rec["points"] = len(points)
                buf.extend(points)
                del buf[:-cfg.buffer]
                net.train()

                def minibatch_losses():
                    pick = rng.choice(len(buf), min(cfg.batch, len(buf)), replace=False)
                    return losses(net, [buf[int(i)] for i in pick])
                rec["loss_policy"], rec["loss_value"] = gradient_steps(net, opt, cfg.steps_per_episode,
                                                                       minibatch_losses)
                steps += cfg.steps_per_episode
            history.append(rec)
            ep += 1
            if progress is not None:
                progress(rec)
    net.eval()
    recent = [h for h in history if "error" not in h][-20:]
    metrics = {k: _mean([h.get(k) for h in recent]) for k in ("policy_ce", "top1", "loss_policy", "loss_value")}
    card = {"data": card_data, "metrics_last20_episodes": metrics, "command": cfg.command,
            "failed_episodes": sum(1 for h in history if "error" in h),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "minutes": round((time.monotonic() - start) / 60, 2)}
    save_checkpoint(cfg.out, net, optimizer=opt, progress={"episodes": ep, "steps": steps, "seed": cfg.seed,
                                                            "history": history}, card=card, fmt=STRUCTURE_FORMAT)
    return {"checkpoint": cfg.out, "head": "structure", "episodes": ep, "steps": steps,
            "minutes": round((time.monotonic() - start) / 60, 2), **metrics}

