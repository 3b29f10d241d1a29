"""Run several deploy scenarios in one torch.multiprocessing launch (gloo), and the single-process reference."""

from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from tag.deploy.rank_exit import exit_rank


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, scenarios, make, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    from tag.deploy.schedule import build_schedule
    from tag.deploy.train import train_rank

    try:
        for sc in scenarios:
            graph, program, groups = make(sc)
            sched = build_schedule(graph, groups, sc["strategy"], sc["machines"], nproc=world)
            extra = {}
            if "data" in sc:  # user data: a DataSource and a loss name (tag.deploy.dataset.resolve_loss)
                from tag.deploy.dataset import resolve_loss

                extra = {"data": sc["data"], "loss": resolve_loss(sc["loss"])}
            if "resume_at" in sc:  # train to a checkpoint, then resume it on fresh programs
                extra["resume"] = _checkpoint_state(sc, graph, program, sched, rank, world, outdir)
                extra["start_step"] = sc["resume_at"]
                graph, program, groups = make(sc)
                sched = build_schedule(graph, groups, sc["strategy"], sc["machines"], nproc=world)
            res = train_rank(sched, graph, program, rank, sc["steps"], sc.get("seed", 0), sc["optimizer"], sc["lr"],
                             precision=sc.get("precision", "fp32"), **extra)
            torch.save({"losses": res.losses, "params": res.params, "step_ms": res.step_ms},
                       os.path.join(outdir, f"{sc['name']}_{rank}.pt"))
    finally:
        dist.destroy_process_group()
    exit_rank()  # success: skip the C++ teardown that can abort (tag.deploy.rank_exit)


def _checkpoint_state(sc, graph, program, sched, rank, world, outdir) -> dict:
    """Train steps [0, sc["resume_at"]), gather the whole state as a checkpoint does (`checkpoint.gather_state`),
    save it (rank 0, as <name>_state.pt) and return it on every rank."""
    from tag.deploy import checkpoint as ckpt
    from tag.deploy.train import train_rank

    path = os.path.join(outdir, f"{sc['name']}_state.pt")

    def save(rt, step):
        state = ckpt.gather_state(program, rt.trained_weights(), rt.optimizer_state(), rank, world)
        if state is not None:
            torch.save({"weights": state[0], "optimizer": state[1], "step": step}, path)

    train_rank(sched, graph, program, rank, sc["resume_at"], sc.get("seed", 0), sc["optimizer"], sc["lr"],
               on_epoch_end=save)
    dist.barrier()
    return torch.load(path, weights_only=True)


def run_scenarios(world: int, scenarios: list[dict], make, outdir: str) -> dict[str, list[dict]]:
    """Spawn `world` ranks that run every scenario in turn; returns per scenario the list of rank results."""
    mp.spawn(_worker, args=(world, free_port(), scenarios, make, outdir), nprocs=world, join=True)
    return {sc["name"]: [torch.load(os.path.join(outdir, f"{sc['name']}_{r}.pt")) for r in range(world)]
            for sc in scenarios}


def reference_training(graph, program, data, targets, steps, optimizer, lr):
    """Plain single-process full-batch training: losses per step and final parameters."""
    params = [program.param(n) for n in program.param_names]
    opt = {"sgd": lambda: torch.optim.SGD(params, lr=lr),
           "momentum": lambda: torch.optim.SGD(params, lr=lr, momentum=0.9),
           "adam": lambda: torch.optim.Adam(params, lr=lr)}[optimizer]()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        env = dict(data)
        env = program.run_ops(list(range(len(graph.ops))), env, graph.batch_size)
        loss = sum(F.mse_loss(env[t], targets[t]) for t in targets)
        loss.backward()
        losses.append(float(loss.detach()))
        opt.step()
    return losses, {n: program.param(n).detach().clone() for n in program.param_names}


def assert_ranks_match_reference(ranks: list[dict], ref_losses, ref_params, name: str) -> None:
    """Every rank's per-step losses equal the reference's (rel 1e-4), every parameter a rank returns equals the
    reference's (rtol 1e-4, atol 1e-6), and every reference parameter is returned by some rank."""
    import pytest

    seen = set()
    for r in ranks:
        assert r["losses"] == pytest.approx(ref_losses, rel=1e-4), name
        for n, v in r["params"].items():
            seen.add(n)
            torch.testing.assert_close(v, ref_params[n], rtol=1e-4, atol=1e-6, msg=f"{name}: {n}")
    assert seen == set(ref_params), name


def assert_scenario_matches_reference(sc: dict, ranks: list[dict], make, outdir: str) -> None:
    """A `run_scenarios` scenario's rank results against plain training of `make(sc)` on the synthetic batch: the
    loss moved, and (`assert_ranks_match_reference`) losses and parameters equal. With ``resume_at`` k, the saved
    checkpoint holds whole parameters (and whole Adam states) equal to plain training's after k steps, and the ranks'
    losses are those of steps k..."""
    from tag.deploy.data import synthetic_batch

    graph, program, _ = make(sc)
    data, targets = synthetic_batch(graph, graph.batch_size, 0)
    ref_losses, ref_params = reference_training(graph, program, data, targets, sc["steps"], sc["optimizer"], sc["lr"])
    assert ref_losses[-1] < ref_losses[0], sc["name"]  # training moved the loss
    if "resume_at" in sc:  # ranks trained steps [k, steps) from the whole state they saved after step k
        k = sc["resume_at"]
        saved = torch.load(os.path.join(outdir, f"{sc['name']}_state.pt"), weights_only=True)
        graph, program, _ = make(sc)
        _, at_k = reference_training(graph, program, data, targets, k, sc["optimizer"], sc["lr"])
        assert saved["step"] == k and set(saved["weights"]) == set(at_k), sc["name"]
        for n, v in at_k.items():  # whole parameters, not slices or ZeRO shards
            torch.testing.assert_close(saved["weights"][n], v, rtol=1e-4, atol=1e-6, msg=f"{sc['name']}: {n}")
            if sc["optimizer"] == "adam":
                assert saved["optimizer"][n]["exp_avg"].shape == v.shape, n  # whole Adam states
        ref_losses = ref_losses[k:]
    assert_ranks_match_reference(ranks, ref_losses, ref_params, sc["name"])


DIGITS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "digits")


def digits_reference(steps: int, batch: int, lr: float):
    """The digits MLP (examples/digits, seed 0) trained by plain torch on the documented batch order (epoch e's
    default_rng([0, e]) permutation, drop_last), mean cross entropy, Adam: (per-step losses, trained state_dict)."""
    import sys

    import numpy as np

    sys.path.insert(0, DIGITS)
    import digits
    from make_model import mlp

    x, y = (torch.from_numpy(a) for a in digits.train_set())
    model = mlp(0)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, per_epoch = [], len(y) // batch
    for step in range(steps):
        epoch, k = divmod(step, per_epoch)
        idx = torch.from_numpy(np.random.default_rng([0, epoch]).permutation(len(y))[k * batch:(k + 1) * batch])
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, model.state_dict()
