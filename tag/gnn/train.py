"""Training the search's network: targets from the simulator, on random (model, topology) pairs.

Each episode draws one (model, topology) pair and makes samples in one of two ways (`targets`):

* ``lookahead`` (default): walks down the search's decision order from the best baseline, simulating every
  candidate at each depth (`tag.gnn.lookahead`): policy target = softmax of the children's values, value
  targets = ln(time_scale_ms / iteration_ms) of the states and children;
* ``visits`` (expert iteration): runs MCTS (`playouts`, no refinement) with the network's priors mixed with
  Dirichlet noise; policy target = the visit distribution, value targets = simulated strategies.

Samples go to a replay buffer (policy: cross-entropy; value: Huber loss).
Then a few gradient steps on minibatches drawn from the buffer. Every random choice comes from `seed` and the
episode number, so a resumed run continues the same sequence of episodes. Before an episode's samples join the
buffer the network is scored on them (Kendall tau of its values, cross-entropy of its policy): a running
measure on instances it has not trained on yet.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from tag.gnn.graph import batch_graphs
from tag.errors import InputError
from tag.gnn.checkpoint import load_checkpoint, save_checkpoint
from tag.gnn.metrics import kendall_tau
from tag.gnn.model import TagGNN, policy_log_probs
from tag.gnn.priors import make_priors_fn
from tag.gnn.lookahead import lookahead_samples
from tag.gnn.selfplay import episode_samples, load_instance, run_search, start_search


GROUP_CHOICES = (8, 12, 16)


@dataclass
class TrainConfig:
    models: list[str]
    topologies: list  # topology.json paths or ("random", seed) pairs, see `topology_sources`
    out: str
    minutes: float = 20.0
    seed: int = 0
    profile: str | None = None
    init: str | None = None
    resume: bool = False
    episodes: int | None = None  # stop after this many episodes in total (None: only the time limit)
    playouts: int = 150
    targets: str = "lookahead"  # or "visits" (expert iteration on MCTS visit counts)
    trajectories: int = 2  # lookahead walks per episode
    lookahead_depth: int = 8  # decisions per walk: the first groups of the search order (the costliest)
    groups: int | None = None  # op groups per model; None: drawn from GROUP_CHOICES per episode
    steps_per_episode: int = 12
    batch_policy: int = 32
    batch_value: int = 64
    lr: float = 1e-3
    noise: float = 0.25
    buffer: int = 6000
    save_every: int = 5
    hidden: int = 64
    layers: int = 3
    heads: int = 4
    command: str = ""
    topology_spec: str = ""


def topology_sources(spec: str, seed: int, profile_device_type: str | None = None) -> list:
    """``DIR`` -> its *.json files (sorted); ``random:N`` -> N random clusters drawn from `seed`.

    Random clusters have 1-4 machines of 1-4 devices (small enough for many episodes); with a profile, made
    of the profiled device type when the catalog knows it.
    """
    from tag.errors import InputError

    if spec.startswith("random:"):
        try:
            n = int(spec.split(":", 1)[1])
            if n <= 0:
                raise ValueError
        except ValueError:
            raise InputError("--topologies", "random:N", "a positive integer N", spec) from None
        rng = np.random.default_rng(seed)
        return [("random", int(s), profile_device_type) for s in rng.integers(10_000, 2**31 - 1, size=n)]
    if os.path.isdir(spec):
        files = sorted(os.path.join(spec, f) for f in os.listdir(spec) if f.endswith(".json"))
        if not files:
            raise InputError(spec, "directory", "topology .json files", "none")
        return files
    if os.path.isfile(spec) and spec.endswith(".json"):
        return [spec]
    raise InputError("--topologies", "value", "a directory of topology .json files or random:N", spec)


def load_cluster(src):
    """A Cluster from a topology path or a ("random", seed, device_type | None) source."""
    from tag.topology import load_topology, parse_topology, random_topology

    if isinstance(src, (tuple, list)):
        _, seed, dtype = src
        from tag.topology.catalog import CATALOG
        types = (dtype,) if dtype and dtype in CATALOG else None
        obj = random_topology(int(seed), max_machines=4, max_devices_per_machine=4, device_types=types)
        return parse_topology(obj, f"random:{seed}")
    return load_topology(src)


def _file_sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def losses(net: TagGNN, policy: list, value: list):
    """(policy cross-entropy to the target distributions, value Huber loss) on lists of samples (either may be
    empty)."""
    zero = torch.zeros(())
    lp = lv = zero
    if policy:
        b = batch_graphs(policy)
        logits, v = net(b)
        logp = policy_log_probs(b, logits)
        lp = -(b["cand"].target * logp).sum() / len(policy)
        lv = lv + torch.nn.functional.smooth_l1_loss(v, b.value, beta=0.5)
    if value:
        b = batch_graphs(value)
        _, v = net(b, with_policy=False)
        lv = lv + torch.nn.functional.smooth_l1_loss(v, b.value, beta=0.5)
    return lp, lv


def fresh_metrics(net: TagGNN, samples) -> dict:
    """Kendall tau of predicted values and policy cross-entropy on samples the network has not trained on."""
    out = {}
    with torch.no_grad():
        if len(samples.value) >= 3:
            b = batch_graphs(samples.value)
            _, v = net(b, with_policy=False)
            out["tau"] = kendall_tau(v.numpy(), b.value.numpy())
        if samples.policy:
            lp, _ = losses(net, samples.policy, [])
            out["policy_ce"] = float(lp)
    return out


def train(cfg: TrainConfig, progress=None) -> dict:
    """Run expert iteration until `minutes` or `episodes`; write `cfg.out` (and its card); return metrics."""
    from tag.strategy import TrainingConfig

    torch.set_num_threads(1)
    start = time.monotonic()
    torch.manual_seed(cfg.seed)
    progress_state = {"episodes": 0, "steps": 0, "seed": cfg.seed, "history": []}
    optimizer_state = None
    if cfg.resume and os.path.exists(cfg.out):
        net, obj = load_checkpoint(cfg.out)
        progress_state.update(obj.get("progress") or {})
        optimizer_state = obj.get("optimizer")
    elif cfg.init:
        net, _ = load_checkpoint(cfg.init)
    else:
        net = TagGNN(hidden=cfg.hidden, layers=cfg.layers, heads=cfg.heads, value_prior=True)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    if optimizer_state:
        opt.load_state_dict(optimizer_state)
    training = TrainingConfig()
    graph_cache: dict = {}
    buf_policy: list = []
    buf_value: list = []
    history: list = list(progress_state.get("history") or [])
    card_data = {
        "models": [{"file": os.path.basename(m), "sha256_16": _file_sha(m)} for m in cfg.models],
        "topologies": cfg.topology_spec or [str(t) for t in cfg.topologies],
        "profile": os.path.basename(cfg.profile) if cfg.profile else None,
        "cost_model": "profile" if cfg.profile else "roofline",
        "targets": cfg.targets,
        "playouts_per_episode": cfg.playouts if cfg.targets == "visits" else None,
        "trajectories_per_episode": cfg.trajectories if cfg.targets == "lookahead" else None,
        "init": os.path.basename(cfg.init) if cfg.init else None,
    }

    def checkpoint() -> None:
        recent = history[-20:]
        metrics = {k: _mean([h.get(k) for h in recent]) for k in ("tau", "policy_ce", "loss_policy", "loss_value", "speedup")}
        card = {"data": card_data, "metrics_last20_episodes": metrics, "command": cfg.command,
                "failed_episodes": sum(1 for h in history if "error" in h),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "minutes": round((time.monotonic() - start) / 60, 2)}
        progress_state["history"] = history
        save_checkpoint(cfg.out, net, optimizer=opt, progress=progress_state, card=card)

    while True:
        ep = int(progress_state["episodes"])
        if cfg.episodes is not None and ep >= cfg.episodes:
            break
        if time.monotonic() - start > cfg.minutes * 60:
            break
        rng = np.random.default_rng([cfg.seed, ep])
        model = cfg.models[int(rng.integers(len(cfg.models)))]
        topo = cfg.topologies[int(rng.integers(len(cfg.topologies)))]
        k = cfg.groups or int(rng.choice(GROUP_CHOICES))
        rec = {"episode": ep}
        try:
            cluster = load_cluster(topo)
            inst = load_instance(model, cluster, training, profile=cfg.profile, groups=k, graph_cache=graph_cache)
            rec["instance"] = f"{inst.name}/K{inst.gg.n_groups}"
            net.eval()
            if cfg.targets == "lookahead":
                run = start_search(inst, None, seed=int(rng.integers(2**31)))
                samples = (lookahead_samples(inst, run, rng, trajectories=cfg.trajectories, max_depth=cfg.lookahead_depth)
                           if run else None)
            else:
                priors = make_priors_fn(net, inst.features, noise=cfg.noise, rng=rng)
                run = run_search(inst, cfg.playouts, priors, seed=int(rng.integers(2**31)))
                samples = episode_samples(inst, run, rng) if run else None
        except InputError:
            raise
        except Exception as e:  # a failing instance must not end a long run; the card counts them
            rec["error"] = f"{type(e).__name__}: {str(e)[:120]}"
            run = None
        if run is not None:
            rec.update(fresh_metrics(net, samples))
            rec["speedup"] = math.exp(max(0.0, run.evaluator.best[0]))
            buf_policy.extend(samples.policy)
            buf_value.extend(samples.value)
            del buf_policy[:-cfg.buffer]
            del buf_value[:-cfg.buffer]
            net.train()

            def minibatch_losses():
                bp = [buf_policy[i] for i in rng.choice(len(buf_policy), min(cfg.batch_policy, len(buf_policy)), replace=False)] if buf_policy else []
                bv = [buf_value[i] for i in rng.choice(len(buf_value), min(cfg.batch_value, len(buf_value)), replace=False)] if buf_value else []
                return losses(net, bp, bv)
            rec["loss_policy"], rec["loss_value"] = gradient_steps(net, opt, cfg.steps_per_episode, minibatch_losses)
            progress_state["steps"] = int(progress_state["steps"]) + cfg.steps_per_episode
        history.append(rec)
        progress_state["episodes"] = ep + 1
        if progress is not None:
            progress(rec)
        if (ep + 1) % cfg.save_every == 0:
            checkpoint()
    checkpoint()
    recent = history[-20:]
    return {"checkpoint": cfg.out, "episodes": int(progress_state["episodes"]), "steps": int(progress_state["steps"]),
            "minutes": round((time.monotonic() - start) / 60, 2),
            **{k: _mean([h.get(k) for h in recent]) for k in ("tau", "policy_ce", "loss_policy", "loss_value", "speedup")}}


def gradient_steps(net, opt, steps: int, minibatch_losses) -> tuple[float | None, float | None]:
    """`steps` Adam steps on (policy loss + value loss) of `minibatch_losses()` (a fresh minibatch each call),
    gradients clipped to norm 5; returns the mean policy and value losses."""
    lps, lvs = [], []
    for _ in range(steps):
        lp, lv = minibatch_losses()
        opt.zero_grad()
        (lp + lv).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        opt.step()
        lps.append(float(lp.detach()))
        lvs.append(float(lv.detach()))
    return _mean(lps), _mean(lvs)


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(xs)) if xs else None
