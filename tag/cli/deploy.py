"""`tag deploy PLAN.json MODEL.onnx`: train the model under the plan on local torch.distributed ranks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tag.cli.util import add_model_flags, add_output_flags, add_verb
from tag.profile.contention import usable_cores as available_cores  # CPU cores this process may run on


def add_parser(sub):
    p = add_verb(sub, "deploy", "run a plan with torch.distributed (gloo on CPU, NCCL on GPU)",
                 "tag deploy plan.json datasets/models/mlp.onnx --steps 5 --nproc 2",
                 description=(
                     "Run every device of the plan as a local rank (torchrun underneath) and train. With --data, "
                     "each step is one global batch of the dataset (seeded shuffle per epoch, the last partial "
                     "batch of an epoch dropped), each rank reading its own rows; without it, every step trains on "
                     "one synthetic batch (standard-normal inputs and targets, a function of --seed and the batch "
                     "only) with MSE. --nproc N maps the plan's devices onto N ranks in contiguous blocks of "
                     "topology order; the devices sharing a rank concatenate their rows. Each cpu rank runs "
                     "--threads threads. Prints the loss of every step (and per epoch with --data) and the measured "
                     "step time (median after --warmup steps) beside the plan's prediction. Your own data: e.g. "
                     "--data examples/digits/digits.py:train_set --loss cross_entropy --epochs 10 --lr 0.01 "
                     "--export trained.onnx (docs/deploy.md)."))
    p.add_argument("plan", help="plan.json written by `tag plan`")
    p.add_argument("model", help="the ONNX model the plan was made for")
    p.add_argument("--topology", default=None, metavar="T.json",
                   help="the plan's topology file (default: the plan's topology.path)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="total training steps, counting those a --checkpoint already holds (default: 5 without "
                        "--data, else one epoch)")
    p.add_argument("--epochs", type=int, default=None, metavar="E", help="passes over --data (instead of --steps)")
    p.add_argument("--data", default=None, metavar="MODULE:FACTORY",
                   help="a Python callable (module:name or path/to/file.py:name) returning a dataset of "
                        "(inputs, target) pairs or a pair (X, y) of arrays")
    p.add_argument("--loss", default=None, metavar="NAME",
                   help="mse, cross_entropy, nll, bce, or module:function returning per-row losses (default mse); "
                        "cross_entropy and nll take [rows, C] scores with [rows] labels, or a sequence's "
                        "[rows, T, C] (or [rows, C, T]) with [rows, T] labels: the mean over positions; a label "
                        "of -100 is ignored (torch's ignore_index)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the plan's training.lr)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="resume from DIR if it holds a checkpoint of this run; save there after every epoch and "
                        "at the end")
    p.add_argument("--export", default=None, metavar="PATH",
                   help="write the trained weights: a .pt state_dict (the model's parameter names) or an .onnx "
                        "model with trained initializers")
    p.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="local ranks (default: one per plan device)")
    p.add_argument("--seed", type=int, default=0, help="seed of parameters and synthetic data (default 0)")
    p.add_argument("--threads", type=int, default=1, help="threads per cpu rank (default 1)")
    p.add_argument("--warmup", type=int, default=1, metavar="W", help="steps left out of the step time (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds without progress before the run is declared hung and killed (default 300)")
    p.add_argument("--print-launch", action="store_true",
                   help="print the torchrun command of each machine of the plan's cluster and exit")
    p.add_argument("--no-speed-check", action="store_true",
                   help="predict from the profile as it was taken, without first re-timing its reference step "
                        "(by default deploy times the profile's single-rank step now and scales the prediction's "
                        "compute by sqrt(now / then): the machine's speed drifts)")
    add_model_flags(p)
    p.set_defaults(optimizer=None)
    for action in p._actions:
        if action.dest == "optimizer":
            action.help = "optimizer to train with (default: the plan's training.optimizer)"
    add_output_flags(p)
    return p


@dataclass(frozen=True)
class RunPrediction:
    """The step `tag deploy` predicts for the ranks it runs: step_ms (None when it cannot: `note` says why),
    cost_model (``profile:NAME`` or ``roofline``), ranks, the concurrency and compute scale of the contention
    terms (`tag.cost.contention.DeployedStep`), note (why not, or what the prediction lacks)."""

    step_ms: float | None
    cost_model: str
    ranks: int
    concurrency: float | None = None
    compute_scale: float | None = None
    note: str | None = None
    speed_check: dict | None = None  # `tag.profile.speed_check.SpeedCheck.to_json` when deploy re-timed the profile

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def predict_as_run(job, speed: float = 1.0) -> RunPrediction:
    """Re-simulate `job`'s plan as deploy runs it (`tag.cost.contention.deployed_step_ms`): on its ranks
    (`tag.deploy.job.ranks_strategy`: devices sharing a rank merged), with the plan's profile's cost model, the
    collective rates and barrier `tag profile links` measured into the topology, blocking exchanges, bucket sums
    overlapping the backward as the runtime starts them (after it when the ranks fill the profile's cores,
    `tag.cost.contention.sums_overlap`), and the profile's contention terms. This is what the
    fidelity benchmark's headline column measures (`benchmarks/fidelity.py`). `speed` (default 1) multiplies every
    compute time: the machine's speed when the step runs over when the profile was taken (`tag deploy` measures it
    right before the ranks start, `tag.profile.speed_check`)."""
    from tag.cli._as_deployed import as_deployed_step
    from tag.deploy.job import ranks_strategy
    from tag.modelio import ModelOptions, load_inputs

    if job.profile_note:
        return RunPrediction(None, "-", job.nproc, note=job.profile_note)
    batch = sum(job.strategy.decisions[0].batch_rows)
    inp = load_inputs(job.model_path, job.topology_path, ModelOptions(batch_size=batch, profile=job.profile_path),
                      plan_path=job.plan_path)
    strategy = ranks_strategy(inp.strategy, inp.cluster.n_devices, job.nproc)
    res, missing = as_deployed_step(inp, strategy, job.nproc, job.topology_path, speed)
    missing = (["profile (roofline cost model)"] if job.profile_path is None else []) + missing
    note = ("without " + ", ".join(missing)) if missing else None
    if res.oom:
        note = "; ".join(x for x in (note, "the simulated memory does not fit: time as if it did") if x)
    return RunPrediction(res.step_ms, inp.cost.name, job.nproc, res.concurrency, res.scale, note)


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def cores_warning(nproc: int, threads: int, cores: int) -> str | None:
    """The warning when nproc ranks x threads each outnumber the cores (the measured step then includes time
    slicing that the plan's prediction does not model), else None.

    >>> cores_warning(4, 1, 2)
    '4 ranks x 1 thread need 4 cores, this machine has 2: ranks time-share cores, so the measured step is slower than the plan predicts (use --nproc 2 or fewer, or a machine with more cores)'
    """
    if nproc * threads <= cores:
        return None
    fits = max(1, cores // threads)
    return (f"{nproc} ranks x {threads} thread{'s' if threads > 1 else ''} need {nproc * threads} cores, this machine "
            f"has {cores}: ranks time-share cores, so the measured step is slower than the plan predicts (use "
            f"--nproc {fits} or fewer, or a machine with more cores)")


def run(args) -> int:
    import sys

    from tag.cli.util import emit, progress, table
    from tag.cli.inputs import prepare_verb_job
    from tag.deploy.launcher import DeployFailed, launch, launch_commands
    from tag.errors import InputError

    for flag, value, low in (("--steps", args.steps, 1), ("--epochs", args.epochs, 1), ("--threads", args.threads, 1),
                             ("--warmup", args.warmup, 0), ("--nproc", args.nproc, 1)):
        if value is not None and value < low:
            raise InputError(flag, "N", f"an integer >= {low}", str(value))
    if args.lr is not None and not (args.lr > 0 and args.lr != float("inf")):
        raise InputError("--lr", "LR", "a positive finite learning rate", str(args.lr))
    if args.timeout <= 0:
        raise InputError("--timeout", "S", "a positive number of seconds", str(args.timeout))
    job = prepare_verb_job(args)
    oversubscribed = None if _has_gpu() else cores_warning(job.nproc, job.threads, available_cores())
    if oversubscribed and not args.print_launch:
        sys.stderr.write(f"tag deploy: warning: {oversubscribed}\n")
    if args.print_launch:
        cmds = launch_commands(job)
        emit(args, {"machines": [{"machine": m, "command": c} for m, c in cmds]},
             "# on each machine (same paths everywhere; MASTER_HOST = the first machine's address):\n"
             + "\n".join(f"[{m}] {c}" for m, c in cmds))
        return 0
    check = None
    if job.profile_path and not job.profile_note and not args.no_speed_check and not _has_gpu():
        from tag.profile.speed_check import speed_check

        try:
            check = speed_check(job.model_path, job.profile_path, job.batch_size)
        except (InputError, ValueError, KeyError) as e:  # the run goes on without it, and says so
            sys.stderr.write(f"tag deploy: warning: speed check skipped: {e}\n")
    try:
        prediction = predict_as_run(job, speed=check.factor if check else 1.0)
        if check:
            prediction = dataclasses.replace(prediction, speed_check=check.to_json())
    except (InputError, ValueError) as e:  # the run goes on; the prediction says why it is missing
        prediction = RunPrediction(None, "-", job.nproc, note=f"cannot simulate the plan on {job.nproc} ranks: {e}")
    bar = progress(total=job.steps, desc="deploy", unit="step")
    bar.update(job.start_step)
    try:
        res = launch(job, on_step=lambda n: bar.update(job.start_step + n - bar.n))
    except DeployFailed as e:
        bar.close()
        sys.stderr.write(f"tag deploy: error: {e}\n")
        return 1
    bar.close()
    epochs = res.extra.get("epochs", [])
    out = {"measured_step_ms": res.measured_step_ms, "predicted_step_ms": prediction.step_ms,
           "plan_predicted_ms": job.predicted_step_ms, "prediction": prediction.to_json(),
           "losses": res.losses, "step_ms": res.step_ms, "steps": job.steps, "first_step": job.start_step,
           "nproc": job.nproc, "devices": len(job.device_ids), "batch_size": job.batch_size,
           "optimizer": job.training.optimizer, "lr": job.training.lr, "loss": job.loss,
           "data": None if job.data is None else job.data.spec, "epochs": epochs, "backend": res.backend,
           "seed": job.seed, "checkpoint": job.checkpoint, "export": job.export}
    rows = [(job.start_step + i, loss, ms) for i, (loss, ms) in enumerate(zip(res.losses, res.step_ms))]
    pred = ("-" if prediction.step_ms is None else f"{prediction.step_ms:.2f} ms") + \
        f" on {prediction.ranks} ranks ({prediction.cost_model}" + (f"; {prediction.note}" if prediction.note else "") + \
        (f"; compute x{check.factor:.2f}: the profile's reference step took {check.now_ms:.1f} ms now, "
         f"{check.then_ms:.1f} ms when profiled, at {check.rows} rows" if check and prediction.step_ms is not None else "") + ")"
    data = "synthetic data (one seeded batch)" if job.data is None else \
        f"{job.data.spec} ({job.data.order.n_rows} rows, {job.data.order.steps_per_epoch} steps per epoch)"
    human = (f"deployed {job.plan_path} on {job.nproc} {res.backend} ranks ({len(job.device_ids)} plan devices), "
             f"batch {job.batch_size}, optimizer {job.training.optimizer} lr {job.training.lr:g}, loss {job.loss}, "
             f"{data}\n" + table(rows, ["step", "loss", "step_ms"]))
    if epochs:
        human += "\n" + table([(e["epoch"], e["steps"], e["loss"], "-" if e["accuracy"] is None else
                                f"{e['accuracy']:.4f}", "-" if e["samples_per_s"] is None else f"{e['samples_per_s']:.0f}")
                               for e in epochs], ["epoch", "steps", "loss", "accuracy", "samples/s"])
    human += (f"\nmeasured step: {res.measured_step_ms:.2f} ms (median after {job.warmup} warm-up steps); "
              f"predicted: {pred}")
    gpu_plan_on_cpu = res.backend == "gloo" and any(k == "gpu" for k in job.device_kinds)
    if gpu_plan_on_cpu:  # equivalence runs: the step time is this CPU's, the prediction the plan's GPUs'
        human += ("\n(the plan's devices are GPUs and these ranks run on CPU: the losses are the plan's, the measured "
                  "step is this machine's, and the prediction is for the plan's GPUs)")
    elif job.profile_path is None:  # the catalog's nominal figures: say how to predict this machine instead
        human += (f"\n(the plan has no profile, so the prediction uses the device catalog's nominal figures; for one "
                  f"of this machine: tag profile ops {job.model_path}{_shape_flags(job.graph.input_shapes)} -o profile.json, "
                  f"then tag plan ... --profile profile.json)")
    if job.checkpoint:
        human += f"\ncheckpoint: {job.checkpoint} at step {job.steps}"
    if job.export:
        human += f"\ntrained weights: {job.export}"
    emit(args, out, human)
    return 0


def _shape_flags(input_shapes: dict) -> str:
    """` --input-shape NAME=AxB ...` for the data-input shapes the model was loaded with (the plan's
    model.input_shapes, `OpGraph.input_shapes`), else ''."""
    return "".join(f" --input-shape {name}=" + "x".join(str(d) for d in dims) for name, dims in input_shapes.items())
