"""Does the GNN generalise? MCTS quality with and without it on models and topologies held out of training.

    python benchmarks/gnn_generalisation.py            # full run, writes benchmarks/gnn_generalisation.md
    python benchmarks/gnn_generalisation.py --quick    # 2 instances, 400 playouts (a smoke run)
    python benchmarks/gnn_generalisation.py --tau-only # only the value head's tau (uniform searches; no GNN search)

Held out of the shipped weights' training entirely (see pretrained/README.md): the models resnet_tiny and
dlrm_tiny, the topologies heterog8, modern8, tag16 and random seeds 3 and 7 (4 machines x 4 devices at most;
training draws seeds >= 10000). Search as `plan(refine=False, sfb=False)`, seed 0, from the best baseline,
K = 12 op groups.

Per instance: speedup over the best baseline (baseline ms / best simulated ms) after 50, 200 and 800
playouts, uniform priors and GNN priors; the playouts each needs to reach 99% of the speedup uniform MCTS
reaches with the maximum (2000); their ratio (GNN / uniform, geomean over instances); and the value
head's Kendall tau against simulated log speedups over every strategy the uniform search simulated that fits
in memory (strategies the network never saw), next to the tau of the critical-path estimate the head reads
(`tag.gnn.estimate`) alone.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tag.gnn.checkpoint import default_checkpoint, load_checkpoint  # noqa: E402
from tag.gnn.metrics import kendall_tau  # noqa: E402
from tag.gnn.priors import DEFAULT_MODE, PRIOR_MODES, UNIFORM_MIX, make_priors_fn  # noqa: E402
from tag.gnn.selfplay import load_instance, start_search  # noqa: E402
from tag.strategy import TrainingConfig  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
HELD_OUT_MODELS = ["resnet_tiny", "dlrm_tiny"]
HELD_OUT_TOPOLOGIES = ["heterog8", "modern8", "tag16", "random:3", "random:7"]
CHECKPOINTS = (50, 200, 800)


def cluster_of(name: str):
    from tag.gnn.train import load_cluster
    if name.startswith("random:"):
        return load_cluster(("random", int(name.split(":")[1]), None))
    return load_cluster(os.path.join(ROOT, "datasets", "topologies", name + ".json"))


def curve(run, playouts: int, stop_at: float | None = None, min_playouts: int = 0) -> list[float]:
    """Best speedup after each playout (index p = after p playouts); stops early once `stop_at` is reached
    after `min_playouts`."""
    ev = run.evaluator
    ref = ev.reference_ms

    def speedup() -> float:
        best = ev.best[1]
        return ref / ev.result(best).iteration_ms if best is not None else 1.0

    out = [speedup()]
    for p in range(1, playouts + 1):
        run.tree.playout()
        out.append(speedup())
        if stop_at is not None and p >= min_playouts and out[-1] >= stop_at:
            break
    return out


def needed(c: list[float], target: float) -> int | None:
    """First playout count >= 1 whose speedup reaches target (None if never)."""
    for p in range(1, len(c)):
        if c[p] >= target - 1e-12:
            return p
    return None


def value_taus(net, inst, run) -> tuple[float, float]:
    """Kendall tau against simulated log speedups, over the cached strategies that fit, of (the value head, the
    critical-path estimate it reads alone: `v_prior`, ln(time_scale_ms / estimated iteration ms))."""
    from tag.gnn.graph import batch_graphs
    items = [(s, r) for s, r in run.evaluator.cache.items() if not r.oom and math.isfinite(r.iteration_ms)]
    if len(items) < 3:
        return float("nan"), float("nan")
    truth = [math.log(run.evaluator.reference_ms / r.iteration_ms) for _, r in items]
    preds, prior = [], []
    with torch.no_grad():
        for i in range(0, len(items), 64):
            b = batch_graphs([inst.features.state(s) for s, _ in items[i:i + 64]])
            preds.extend(net(b, with_policy=False)[1].tolist())
            prior.extend(b.v_prior.tolist())
    return kendall_tau(preds, truth), kendall_tau(prior, truth)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", default=None, help="GNN checkpoint (default: the shipped weights)")
    ap.add_argument("--max-playouts", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="2 instances, 400 playouts")
    ap.add_argument("--models", nargs="*", default=HELD_OUT_MODELS)
    ap.add_argument("--topologies", nargs="*", default=HELD_OUT_TOPOLOGIES)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mix", type=float, default=UNIFORM_MIX,
                    help=f"share of uniform in the GNN priors (default {UNIFORM_MIX}, as `tag plan`)")
    ap.add_argument("--groups", type=int, default=12, help="op groups per model (default 12)")
    ap.add_argument("--md", default=None, help="write the table here (default: benchmarks/gnn_generalisation.md "
                                               "for a full run)")
    ap.add_argument("--mode", choices=PRIOR_MODES, default=DEFAULT_MODE,
                    help=f"priors from the value head over children, the policy head, or both (default {DEFAULT_MODE})")
    ap.add_argument("--tau-only", action="store_true",
                    help="only the value head's Kendall tau per instance (same uniform searches and strategies)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    ckpt = args.ckpt or default_checkpoint()
    if ckpt is None:
        print("no checkpoint: pass --ckpt", file=sys.stderr)
        return 2
    net, obj = load_checkpoint(ckpt)
    pairs = [(m, t) for m in args.models for t in args.topologies]
    max_p = args.max_playouts
    if args.quick:
        pairs, max_p = pairs[:2], 400
    training = TrainingConfig()
    rows, ratios, ratios_gain, taus, est_taus = [], [], [], [], []
    for m, t in pairs:
        t0 = time.monotonic()
        inst = load_instance(os.path.join(ROOT, "datasets", "models", m + ".onnx"), cluster_of(t), training,
                             groups=args.groups)
        uni = start_search(inst, None, args.seed)
        if uni is None:
            print(f"{m}@{t}: every baseline runs out of memory; skipped", file=sys.stderr)
            continue
        cu = curve(uni, max_p)
        t_uni = time.monotonic() - t0
        if args.tau_only:
            tau, tau_est = value_taus(net, inst, uni)
            taus.append(tau)
            est_taus.append(tau_est)
            print(f"{m}@{t}: value tau {tau:.3f} (the estimate alone {tau_est:.3f}) over the strategies "
                  f"uniform@{max_p} simulated", flush=True)
            continue
        target = 0.99 * cu[-1]
        target_gain = math.exp(0.99 * math.log(cu[-1]))  # 99% of the log-speedup gain
        t1 = time.monotonic()
        timed = {"calls": 0, "s": 0.0}
        inner = make_priors_fn(net, inst.features, uniform_mix=args.mix, mode=args.mode)

        def priors(*a):
            t = time.perf_counter()
            out = inner(*a)
            timed["calls"] += 1
            timed["s"] += time.perf_counter() - t
            return out

        gnn = start_search(inst, priors, args.seed)
        cg = curve(gnn, max_p, stop_at=max(target, target_gain), min_playouts=max(CHECKPOINTS))
        t_gnn = time.monotonic() - t1
        nu, ng = needed(cu, target), needed(cg, target)
        nug, ngg = needed(cu, target_gain), needed(cg, target_gain)
        at = lambda c, p: c[min(p, len(c) - 1)]  # a curve stopped early stays at its last value
        tau, tau_est = value_taus(net, inst, uni)
        est_taus.append(tau_est)
        ratio = (ng or max_p) / nu
        ratio_gain = (ngg or max_p) / nug
        if cu[-1] >= 1.01:  # the geomeans count instances where the search has something to find
            ratios.append(ratio)
            ratios_gain.append(ratio_gain)
        taus.append(tau)
        rows.append([f"{m}@{t}", inst.cluster.n_devices, inst.gg.n_groups,
                     *[f"{at(cu, p):.3f}/{at(cg, p):.3f}" for p in CHECKPOINTS], f"{cu[-1]:.3f}",
                     nu, ng if ng is not None else f">{len(cg) - 1}", f"{ratio:.3f}",
                     nug, ngg if ngg is not None else f">{len(cg) - 1}", f"{ratio_gain:.3f}", f"{tau:.3f}",
                     f"{t_uni:.0f}/{t_gnn:.0f}", f"{1e3 * timed['s'] / max(1, timed['calls']):.1f}"])
        print(" | ".join(str(c) for c in rows[-1]), file=sys.stderr, flush=True)
    if args.tau_only:
        print(f"value head Kendall tau (mean over {len(taus)} instances): {np.nanmean(taus):.3f} "
              f"(range {np.nanmin(taus):.3f}..{np.nanmax(taus):.3f}); the critical-path estimate alone "
              f"{np.nanmean(est_taus):.3f}; checkpoint {ckpt}")
        return 0
    headers = ["instance", "devices", "groups", *[f"speedup@{p} uni/gnn" for p in CHECKPOINTS], f"uni@{max_p}",
               "uni needs", "gnn needs", "ratio", "uni needs (gain)", "gnn needs (gain)", "ratio (gain)", "value tau",
               "seconds uni/gnn", "ms per GNN call"]
    geo = lambda xs: float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    summary = (f"\ncheckpoint: {os.path.relpath(ckpt, ROOT) if ckpt.startswith(os.path.abspath(ROOT)) else ckpt}; "
               f"max playouts {max_p}; seed {args.seed}; K = {args.groups} groups; priors = "
               f"{1 - args.mix:g} GNN ({args.mode} head) + {args.mix:g} uniform\n\n"
               f"Geomeans over the {len(ratios)} instances where uniform@{max_p} beats the best baseline by >= 1% "
               f"(elsewhere both need 1 playout and the ratio is 1 by construction).\n\n"
               f"- geomean playouts ratio GNN / uniform to reach 99% of uniform@{max_p} speedup: **{geo(ratios):.3f}** "
               f"(goal <= 0.2)\n"
               f"- same for 99% of the log-speedup gain: **{geo(ratios_gain):.3f}**\n"
               f"- value head Kendall tau (mean over instances): **{np.nanmean(taus):.3f}** (goal >= 0.8); "
               f"the critical-path estimate it corrects, alone: {np.nanmean(est_taus):.3f}\n")
    text = "\n".join(lines) + "\n" + summary
    print(text)
    md = args.md or (None if args.quick or args.models != HELD_OUT_MODELS or args.topologies != HELD_OUT_TOPOLOGIES
                     else os.path.join(ROOT, "benchmarks", "gnn_generalisation.md"))
    if md:
        with open(md, "w") as f:
            f.write("# GNN generalisation (held-out models and topologies)\n\n"
                    "Command: `python benchmarks/gnn_generalisation.py`. Cells `a/b` are uniform / GNN priors; "
                    "speedup = best baseline ms / best simulated ms; \"needs\" = playouts to reach 99% of the "
                    f"uniform@{max_p} speedup (\"gain\": 99% of its log speedup).\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
