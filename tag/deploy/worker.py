"""One rank of `tag deploy`, started by torchrun: ``python -m tag.deploy.worker RUN_DIR/job.pkl``, or
``python -m tag.deploy.worker --plan P --model M [--topology T] --steps N ...`` on every machine of a
multi-node cluster (each rank then loads and checks the plan itself).

Reads the Job, joins the process group (gloo on CPU, NCCL when CUDA is present and the plan's devices
are GPUs; the group's timeout is twice the job's plus 10 s, so the launcher's watchdog, which knows which
rank stalled, fires first and the group timeout is the backstop), builds the model program with the job's seed (identical
parameters on every rank) and trains. It reports through files in the run directory, which the
launcher watches:

- ``rank{r}.beat``: progress, rewritten atomically: 0 after setup, 2k+1 when step k starts, 2k+2 when
  it ends; the watchdog's signal, and the rank furthest behind is the one blamed for a hang;
- ``rank{r}.error``: ``<unix time>\\n<one-line error>\\n<traceback>`` if the rank fails;
- ``result.json``: rank 0's losses and step times, written only after the last step.

Fault injection for tests: ``TAG_DEPLOY_FAULT=RANK:STEP:MODE`` makes rank RANK, after step STEP, raise
(``raise``), hang (``hang``) or kill itself with SIGKILL (``kill``).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _fault(rank: int):
    spec = os.environ.get("TAG_DEPLOY_FAULT", "")
    if not spec:
        return None
    r, step, mode = spec.split(":")
    return (int(step), mode) if int(r) == rank else None


def main(job_path: str) -> int:
    import torch
    import torch.distributed as dist

    from tag.deploy.job import load_job
    from tag.memory import keep_freed_memory
    from tag.profile.autogroup import apply_from_env

    apply_from_env()  # $TAG_AUTOGROUP_NICE (unset: nothing): this rank's session's CPU share (tag.profile.autogroup)
    keep_freed_memory()  # as `tag profile ops` timed the step (tag.memory); a rank started by hand has no `tag` parent

    job = load_job(job_path)
    run_dir = os.path.dirname(os.path.abspath(job_path))
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    beat = os.path.join(run_dir, f"rank{rank}.beat")
    try:
        # --threads per rank, whatever number of plan devices it hosts: the prediction runs a rank's devices on one
        # device at the profile's speed (`ranks_strategy`), and more threads than cores (2 ranks x 2 hosted
        # devices on 2 cores) time-share them and slow every op down
        torch.set_num_threads(job.threads)
        use_cuda = torch.cuda.is_available() and all(k == "gpu" for k in job.device_kinds)
        device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(device)
        if world != job.nproc:
            raise RuntimeError(f"started with {world} ranks for a job of {job.nproc}")
        dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=2 * job.timeout_s + 10))
        import onnx

        from tag.deploy.onnx_torch import TorchProgram
        from tag.deploy.schedule import build_schedule

        program = TorchProgram(onnx.load(job.model_path), job.graph, seed=job.seed).to(device)
        sched = build_schedule(job.graph, job.groups, job.strategy, job.device_machines, job.nproc, job.plan_path)
        _write_atomic(beat, "0")
        fault = _fault(rank)

        def on_progress(step, done):
            _write_atomic(beat, str(2 * step + (2 if done else 1)))
            if done and fault and fault[0] == step:
                if fault[1] == "raise":
                    raise RuntimeError(f"injected fault at step {step}")
                if fault[1] == "hang":
                    time.sleep(10 ** 6)
                if fault[1] == "kill":
                    os.kill(os.getpid(), 9)

        res = _train(job, sched, program, rank, world, device, on_progress)
        if rank == 0:
            _write_atomic(os.path.join(run_dir, "result.json"), json.dumps({
                "losses": res.losses, "step_ms": res.step_ms, "measured_step_ms": res.measured_step_ms(job.warmup),
                "backend": "nccl" if use_cuda else "gloo", "world": world,
                "extra": {"epochs": res.epochs, "first_step": job.start_step, "correct": res.correct}}))
        dist.destroy_process_group()
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure is reported to the launcher
        line = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        _write_atomic(os.path.join(run_dir, f"rank{rank}.error"), f"{time.time()}\n{line}\n{traceback.format_exc()}")
        sys.stderr.write(f"rank {rank}: {line}\n")
        return 1


def _train(job, sched, program, rank: int, world: int, device, on_progress):
    """train_rank with the job's loss, data and checkpoint (resume before, saves at epoch ends), then --export."""
    from tag.deploy import checkpoint as ckpt
    from tag.deploy.dataset import resolve_loss
    from tag.deploy.train import train_rank

    resume = ckpt.load_state(job.checkpoint) if job.checkpoint and job.start_step > 0 else None
    on_epoch_end = None
    if job.checkpoint:
        def on_epoch_end(rt, step_done):
            state = ckpt.gather_state(program, rt.trained_weights(), rt.optimizer_state(), rank, world)
            if state is not None:
                ckpt.save(job.checkpoint, job.identity, step_done, *state)

    res = train_rank(sched, job.graph, program, rank, job.steps, job.seed, job.training.optimizer, job.training.lr,
                     device, on_progress, loss=resolve_loss(job.loss), data=job.data, start_step=job.start_step,
                     resume=resume, on_epoch_end=on_epoch_end, precision=job.training.precision)
    if job.export:
        state = ckpt.gather_state(program, res.params, {}, rank, world)
        if state is not None:
            ckpt.export_weights(job.export, state[0], job.model_path)
    return res


def job_from_flags(argv: list[str]) -> str:
    """Prepare the job from plan/model flags (multi-node launch, see `tag deploy --print-launch`); returns its path."""
    import argparse

    from tag.deploy.job import DeployOptions, prepare_job, save_job

    p = argparse.ArgumentParser(prog="python -m tag.deploy.worker")
    p.add_argument("--plan", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--topology", default=None)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--optimizer", default=None, choices=["sgd", "momentum", "adam"])
    p.add_argument("--run-dir", default="tag-deploy-run")
    p.add_argument("--data", default=None)
    p.add_argument("--loss", default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--export", default=None)
    a = p.parse_args(argv)
    opts = DeployOptions(topology_path=a.topology, steps=a.steps, nproc=int(os.environ.get("WORLD_SIZE", "1")),
                         seed=a.seed, threads=a.threads, warmup=a.warmup, timeout_s=a.timeout, optimizer=a.optimizer,
                         data=a.data, loss=a.loss, lr=a.lr, checkpoint=a.checkpoint, export=a.export)
    job = prepare_job(a.plan, a.model, opts)
    os.makedirs(a.run_dir, exist_ok=True)
    path = os.path.join(a.run_dir, f"job{os.environ.get('RANK', '0')}.pkl")
    save_job(job, path)
    return path


if __name__ == "__main__":
    arg = sys.argv[1:]
    from tag.deploy.rank_exit import exit_rank

    exit_rank(main(arg[0] if arg and not arg[0].startswith("--") else job_from_flags(arg)))
