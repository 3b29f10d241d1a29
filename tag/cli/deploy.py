"""`tag deploy PLAN.json MODEL.onnx`: train the model under the plan on local torch.distributed ranks."""

from __future__ import annotations

from tag.cli.util import add_model_flags, add_output_flags, add_verb


def add_parser(sub):
    p = add_verb(sub, "deploy", "run a plan with torch.distributed (gloo on CPU, NCCL on GPU)",
                 "tag deploy plan.json datasets/models/mlp.onnx --steps 5 --nproc 2",
                 description=(
                     "Run every device of the plan as a local rank (torchrun underneath) and train for --steps "
                     "steps on synthetic data (a function of --seed and the batch only). --nproc N maps the "
                     "plan's devices onto N ranks in contiguous blocks of topology order; the devices sharing a "
                     "rank concatenate their rows. Each cpu rank runs --threads threads. Prints the loss of every "
                     "step and the measured step time (median after --warmup steps) beside the plan's prediction."))
    p.add_argument("plan", help="plan.json written by `tag plan`")
    p.add_argument("model", help="the ONNX model the plan was made for")
    p.add_argument("--topology", default=None, metavar="T.json",
                   help="the plan's topology file (default: the plan's topology.path)")
    p.add_argument("--steps", type=int, default=5, metavar="N", help="training steps (default 5)")
    p.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="local ranks (default: one per plan device)")
    p.add_argument("--seed", type=int, default=0, help="seed of parameters and synthetic data (default 0)")
    p.add_argument("--threads", type=int, default=1, help="threads per cpu rank (default 1)")
    p.add_argument("--warmup", type=int, default=1, metavar="W", help="steps left out of the step time (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds without progress before the run is declared hung and killed (default 300)")
    p.add_argument("--print-launch", action="store_true",
                   help="print the torchrun command of each machine of the plan's cluster and exit")
    add_model_flags(p)
    p.set_defaults(optimizer=None)
    for action in p._actions:
        if action.dest == "optimizer":
            action.help = "optimizer to train with (default: the plan's training.optimizer)"
    add_output_flags(p)
    return p


def run(args) -> int:
    import sys

    from tag.cli.util import emit, progress, table
    from tag.cli.inputs import prepare_verb_job
    from tag.deploy.launcher import DeployFailed, launch, launch_commands
    from tag.errors import InputError

    for flag, value, low in (("--steps", args.steps, 1), ("--threads", args.threads, 1), ("--warmup", args.warmup, 0),
                             ("--nproc", args.nproc, 1)):
        if value is not None and value < low:
            raise InputError(flag, "N", f"an integer >= {low}", str(value))
    if args.timeout <= 0:
        raise InputError("--timeout", "S", "a positive number of seconds", str(args.timeout))
    job = prepare_verb_job(args)
    if args.print_launch:
        cmds = launch_commands(job)
        emit(args, {"machines": [{"machine": m, "command": c} for m, c in cmds]},
             "# on each machine (same paths everywhere; MASTER_HOST = the first machine's address):\n"
             + "\n".join(f"[{m}] {c}" for m, c in cmds))
        return 0
    bar = progress(total=job.steps, desc="deploy", unit="step")
    try:
        res = launch(job, on_step=lambda n: bar.update(n - bar.n))
    except DeployFailed as e:
        bar.close()
        sys.stderr.write(f"tag deploy: error: {e}\n")
        return 1
    bar.close()
    out = {"measured_step_ms": res.measured_step_ms, "predicted_step_ms": job.predicted_step_ms,
           "losses": res.losses, "step_ms": res.step_ms, "steps": job.steps, "nproc": job.nproc,
           "devices": len(job.device_ids), "batch_size": job.batch_size, "optimizer": job.training.optimizer,
           "backend": res.backend, "seed": job.seed}
    rows = [(i, loss, ms) for i, (loss, ms) in enumerate(zip(res.losses, res.step_ms))]
    pred = "-" if job.predicted_step_ms is None else f"{job.predicted_step_ms:.2f}"
    human = (f"deployed {job.plan_path} on {job.nproc} {res.backend} ranks ({len(job.device_ids)} plan devices), "
             f"batch {job.batch_size}, optimizer {job.training.optimizer}\n"
             + table(rows, ["step", "loss", "step_ms"])
             + f"\nmeasured step: {res.measured_step_ms:.2f} ms (median after {job.warmup} warm-up steps); "
             f"predicted: {pred} ms")
    emit(args, out, human)
    return 0
