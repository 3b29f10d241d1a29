"""Supervised value training on many simulated strategies, with the policy frozen.

Data: per training instance (a training model on a random training cluster, K op groups), a uniform tree
search from the best baseline (`selfplay.start_search`, no network) runs `playouts` playouts; every strategy it
simulated that fits in memory (the Evaluator cache: baselines, partial changes of them, random placements,
replications and sync methods the search tried) becomes a value sample with target `targets.speed_target`
= ln(time_scale_ms / iteration_ms). These are the strategies a search meets, which the value head must rank.

Loss: Huber on the target plus a pairwise logistic ranking loss between strategies of the same instance
(what Kendall tau measures is the order within one instance). Only `TagGNN.value_parameters()` train, so the
policy logits are bit-identical to the initial checkpoint's. Instances of the `--val-models` (training models,
never the benchmark's held-out ones) are kept out of training: the value parameters end at the evaluated step,
0 included, whose tau on them is best.

`--upgrade` starts from a feature-version 2 checkpoint's policy with a new value trunk and a value head that
corrects the critical-path estimate (`upgrade_policy`); the shipped weights were made so:

    python -m tag.gnn.value_fit --upgrade --init tag-gnn-v2.pt -o tag/gnn/pretrained/tag-gnn-v3.pt \
        --collect-minutes 3 --minutes 7 --playouts 2000 --max-states 400 --seed 0
"""

from __future__ import annotations

import math
import os
import pickle
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from tag.gnn.graph import batch_graphs
from tag.gnn.checkpoint import load_checkpoint, save_checkpoint
from tag.gnn.model import TagGNN
from tag.gnn.targets import speed_target

TRAIN_MODELS = ("mlp", "small_cnn", "gpt2_tiny", "transformer_tiny", "inception_tiny", "bert_tiny")
GROUP_CHOICES = (8, 12, 16)


def collect_states(inst, playouts: int, seed: int, max_states: int, rng: np.random.Generator) -> list:
    """Value samples (HeteroGraphs with `.value` [1] and `.inst` [1]) from a uniform search of `playouts` playouts:
    up to `max_states` simulated strategies that fit in memory, drawn without replacement. [] if every
    baseline runs out of memory."""
    from tag.gnn.selfplay import start_search

    run = start_search(inst, None, seed)
    if run is None:
        return []
    for _ in range(playouts):
        run.tree.playout()
    items = [(s, r) for s, r in run.evaluator.cache.items() if not r.oom and math.isfinite(r.iteration_ms)]
    pick = rng.choice(len(items), size=min(max_states, len(items)), replace=False)
    out = []
    for i in sorted(int(i) for i in pick):
        s, r = items[i]
        d = inst.features.state(s)
        d.value = torch.tensor([speed_target(r, inst.features.time_scale_ms)], dtype=torch.float32)
        out.append(d)
    return out


def pair_rank_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor, margin: float = 1e-3) -> torch.Tensor:
    """Mean logistic loss log(1 + exp(-(p_i - p_j) sign(t_i - t_j))) over pairs of one group whose targets differ
    by more than `margin` (0 if there are none)."""
    same = group[:, None] == group[None, :]
    dt = target[:, None] - target[None, :]
    mask = same & (dt > margin)
    if not bool(mask.any()):
        return pred.sum() * 0.0
    dp = pred[:, None] - pred[None, :]
    return torch.nn.functional.softplus(-dp[mask]).mean()


def value_loss(net: TagGNN, samples: list, rank_weight: float = 1.0) -> torch.Tensor:
    """Huber(value, target) + rank_weight x `pair_rank_loss` within instances, on a list of samples."""
    b = batch_graphs(samples)
    _, v = net(b, with_policy=False)
    return (torch.nn.functional.smooth_l1_loss(v, b.value, beta=0.5)
            + rank_weight * pair_rank_loss(v, b.value, b.inst))


def validation_tau(net: TagGNN, val: list) -> float:
    """Mean over instances of the Kendall tau between the value head and the targets (`val`: one batched graph of
    value samples per instance)."""
    from tag.gnn.metrics import kendall_tau

    was = net.training
    net.eval()
    with torch.no_grad():
        taus = [kendall_tau(net(b, with_policy=False)[1].tolist(), b.value.tolist()) for b in val]
    net.train(was)
    return float(np.nanmean(taus)) if taus else float("nan")


def fit_value(net: TagGNN, by_instance: list[list], *, minutes: float, seed: int = 0, lr: float = 1e-3,
              instances_per_batch: int = 4, states_per_instance: int = 24, max_steps: int | None = None,
              progress=None, val: list | None = None, eval_every: int = 250) -> dict:
    """Adam on `net.value_parameters()` only: each step takes `states_per_instance` states from each of
    `instances_per_batch` instances. Stops after `minutes` or `max_steps`. Returns {"steps", "loss"}.

    With `val` (one batched graph per validation instance: states of models not trained on), the validation tau is
    measured before training and every `eval_every` steps, and the value parameters end at the best of those
    points (step 0 included: if no training helps, the network is returned as it came); the result then
    also has "val_tau_start", "val_tau" and "best_step"."""
    rng = np.random.default_rng(seed)
    params = net.value_parameters()
    best = None
    if val:
        best = (validation_tau(net, val), 0, [p.detach().clone() for p in params])
        start_tau = best[0]
    value_ids = {id(p) for p in params}
    for p in net.parameters():
        p.requires_grad_(id(p) in value_ids)
    opt = torch.optim.Adam(params, lr=lr)
    sched_total = max_steps or 10 ** 9
    start, steps, losses = time.monotonic(), 0, []
    net.train()
    pool = [i for i, xs in enumerate(by_instance) if len(xs) >= 2]
    while steps < sched_total and time.monotonic() - start < minutes * 60:
        batch = []
        for k, i in enumerate(rng.choice(pool, size=min(instances_per_batch, len(pool)), replace=False)):
            xs = by_instance[int(i)]
            for j in rng.choice(len(xs), size=min(states_per_instance, len(xs)), replace=False):
                d = xs[int(j)]
                d.inst = torch.tensor([k])
                batch.append(d)
        loss = value_loss(net, batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        opt.step()
        losses.append(float(loss.detach()))
        steps += 1
        if progress is not None and steps % 100 == 0:
            progress({"steps": steps, "loss": float(np.mean(losses[-100:]))})
        if best is not None and steps % eval_every == 0:
            tau = validation_tau(net, val)
            if progress is not None:
                progress({"steps": steps, "val_tau": tau})
            if tau > best[0]:
                best = (tau, steps, [p.detach().clone() for p in params])
    net.eval()
    for p in net.parameters():
        p.requires_grad_(True)
    out = {"steps": steps, "loss": float(np.mean(losses[-100:])) if losses else None}
    if best is not None:
        with torch.no_grad():
            for p, b in zip(params, best[2]):
                p.copy_(b)
        out.update(val_tau_start=start_tau, val_tau=best[0], best_step=best[1])
    return out


def with_value_trunk(net: TagGNN) -> TagGNN:
    """A copy of `net` with a separate value trunk initialised from its shared trunk (same outputs at first)."""
    cfg = {k: v for k, v in net.config.items() if k != "value_trunk"}
    out = TagGNN(**cfg, value_trunk=True)
    out.load_state_dict(net.state_dict(), strict=False)
    _seed_value_trunk(out)
    return out


def _seed_value_trunk(net: TagGNN) -> None:
    """Copy `net`'s shared encoder into its value trunk and set eval mode."""
    net.vtrunk[0].load_state_dict(net.enc.state_dict())
    net.vtrunk[1].load_state_dict(net.convs.state_dict())
    net.vtrunk[2].load_state_dict(net.norms.state_dict())
    net.eval()


def upgrade_policy(path: str) -> tuple[TagGNN, dict]:
    """(network, raw checkpoint) with the policy of the checkpoint at `path` (feature version 2 or 3: their policy
    inputs are the same) and a fresh value trunk (a copy of its shared encoder) and value head that correct the
    critical-path estimate (config "value_trunk" and "value_prior"); the policy logits are unchanged."""
    from tag.errors import InputError

    obj = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(obj, dict) or obj.get("feature_version") not in (2, 3):
        raise InputError(path, "feature_version", "a tag GNN checkpoint of feature version 2 or 3",
                         repr(obj.get("feature_version") if isinstance(obj, dict) else type(obj).__name__))
    cfg = {k: v for k, v in (obj.get("config") or {}).items() if k not in ("value_trunk", "value_prior")}
    out = TagGNN(**cfg, value_trunk=True, value_prior=True)
    policy = {k: v for k, v in obj["model"].items() if not k.startswith(("value.", "vtrunk."))}
    missing, unexpected = out.load_state_dict(policy, strict=False)
    if unexpected or any(not k.startswith(("value.", "vtrunk.")) for k in missing):
        raise InputError(path, "model", "policy weights of the network's configuration",
                         f"missing {missing[:3]}, unexpected {unexpected[:3]}")
    _seed_value_trunk(out)
    return out, obj


def collect(models: list[str], minutes: float, seed: int, playouts: int, max_states: int,
            progress=None) -> list[tuple[str, list]]:
    """States of training instances (model drawn from `models`, cluster from `train.topology_sources('random:1000',
    seed)`, K from GROUP_CHOICES) until `minutes` have passed; one (model name, states) per instance."""
    from tag.gnn.selfplay import load_instance
    from tag.gnn.train import load_cluster, topology_sources
    from tag.strategy import TrainingConfig

    topos = topology_sources("random:1000", seed)
    training, cache, out = TrainingConfig(), {}, []
    start, ep = time.monotonic(), 0
    while time.monotonic() - start < minutes * 60:
        rng = np.random.default_rng([seed, 7919, ep])
        ep += 1
        model = models[int(rng.integers(len(models)))]
        topo = topos[int(rng.integers(len(topos)))]
        try:
            inst = load_instance(model, load_cluster(topo), training, groups=int(rng.choice(GROUP_CHOICES)),
                                 graph_cache=cache)
            xs = collect_states(inst, playouts, int(rng.integers(2**31)), max_states, rng)
        except Exception as e:  # a failing instance must not end the run
            if progress is not None:
                progress({"episode": ep, "error": f"{type(e).__name__}: {str(e)[:100]}"})
            continue
        if len(xs) >= 2:
            out.append((os.path.splitext(os.path.basename(model))[0], xs))
        if progress is not None:
            progress({"episode": ep, "instance": inst.name, "states": len(xs)})
    return out


@dataclass(frozen=True)
class ValueFitOptions:
    """One value-fit run. init: checkpoint whose policy is kept; out: checkpoint written; collect_minutes and
    minutes: wall-clock time of state collection and of training; playouts: per collected instance; max_states:
    value samples kept per instance; value_trunk: train a separate value encoder; upgrade: `init` is a
    feature-version 2 or 3 checkpoint (`upgrade_policy`); lr: Adam learning rate; val_models: training models
    held out for validation; seed; data: pickle of collected states (read if it exists, else written)."""

    init: str
    out: str
    collect_minutes: float = 4.0
    minutes: float = 10.0
    playouts: int = 600
    max_states: int = 400
    value_trunk: bool = False
    upgrade: bool = False
    lr: float = 1e-3
    val_models: tuple[str, ...] = ("gpt2_tiny", "inception_tiny")
    seed: int = 0
    data: str | None = None


def parse_args(argv=None) -> ValueFitOptions:
    """ValueFitOptions from the script's command line (`python -m tag.gnn.value_fit --help`)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tag.gnn.value_fit", description=__doc__.splitlines()[0])
    ap.add_argument("--init", required=True, help="checkpoint whose policy is kept")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--collect-minutes", type=float, default=4.0)
    ap.add_argument("--minutes", type=float, default=10.0, help="training time")
    ap.add_argument("--playouts", type=int, default=600)
    ap.add_argument("--max-states", type=int, default=400)
    ap.add_argument("--value-trunk", action="store_true", help="train a separate value encoder too")
    ap.add_argument("--upgrade", action="store_true",
                    help="--init is a feature-version 2 or 3 checkpoint: keep its policy, start a new value trunk and "
                         "a value head that corrects the critical-path estimate (`upgrade_policy`)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--val-models", default="gpt2_tiny,inception_tiny",
                    help="comma-separated training models held out for validation: the value parameters end at the "
                         "step (0 included) with the best validation tau ('' for none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=None, help="pickle of collected states: read it if it exists, else write it")
    a = ap.parse_args(argv)
    return ValueFitOptions(init=a.init, out=a.out, collect_minutes=a.collect_minutes, minutes=a.minutes,
                           playouts=a.playouts, max_states=a.max_states, value_trunk=a.value_trunk, upgrade=a.upgrade,
                           lr=a.lr, val_models=tuple(m for m in a.val_models.split(",") if m), seed=a.seed,
                           data=a.data)


def run(opts: ValueFitOptions, command: str = "") -> int:
    """Collect (or read) states, fit the value parameters and write `opts.out`; `command` goes on the card."""
    torch.set_num_threads(1)
    torch.manual_seed(opts.seed)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    models = [os.path.join(root, "datasets", "models", m + ".onnx") for m in TRAIN_MODELS]
    if opts.upgrade:
        net, obj = upgrade_policy(opts.init)
    else:
        net, obj = load_checkpoint(opts.init)
    if opts.value_trunk and net.vtrunk is None:
        net = with_value_trunk(net)
    log = lambda r: print(r, file=sys.stderr, flush=True)  # noqa: E731
    if opts.data and os.path.exists(opts.data):
        with open(opts.data, "rb") as f:
            data = pickle.load(f)
    else:
        data = collect(models, opts.collect_minutes, opts.seed, opts.playouts, opts.max_states, progress=log)
        if opts.data:
            with open(opts.data, "wb") as f:
                pickle.dump(data, f)
    val_models = set(opts.val_models)
    train = [xs for name, xs in data if name not in val_models]
    val = [batch_graphs(xs[:200]) for name, xs in data if name in val_models]
    if val_models and not val:
        log({"warning": f"no collected instance of the validation models {sorted(val_models)}"})
    stats = fit_value(net, train, minutes=opts.minutes, seed=opts.seed, lr=opts.lr, progress=log, val=val or None)
    card = dict(obj.get("card") or {})
    card["value_fit"] = {"command": command,
                         "instances": len(train), "states": sum(len(x) for x in train),
                         "validation_models": sorted(val_models), "validation_instances": len(val), **stats,
                         "init": os.path.basename(opts.init), "models": list(TRAIN_MODELS),
                         "topologies": "random:1000 (seed %d)" % opts.seed}
    save_checkpoint(opts.out, net, progress=obj.get("progress"), card=card)
    log({"saved": opts.out, **card["value_fit"]})
    return 0


def main(argv=None) -> int:
    """The script entry point: parse the command line into ValueFitOptions and run."""
    return run(parse_args(argv), "python -m tag.gnn.value_fit " + " ".join(argv or sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
