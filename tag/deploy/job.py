"""A deploy job: the validated plan, model and settings every rank needs, prepared once by the launcher.

`prepare_job` loads the topology, the model and the plan, checks the plan against both (hashes, op
names, device ids, rows: `tag.modelio.load_inputs`) and the SFB entries against what the runtime can
run, and returns a picklable `Job`. Its settings come as a typed `DeployOptions` (the CLI builds it from
the flags). The launcher writes it to the run directory; each rank reads it,
builds the model program with the same seed and trains (`tag.deploy.worker`).
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from typing import Callable

from tag.errors import InputError
from tag.modelio import ModelOptions
from tag.strategy import Strategy, TrainingConfig


@dataclass(frozen=True)
class DeployOptions:
    """How to run a plan. topology_path: None for the plan's topology.path; steps: training steps (>= 1);
    nproc: local ranks, 1..the plan's devices (None: one per device); seed: of parameters and synthetic data;
    threads: per cpu rank; warmup: steps left out of the step time; timeout_s: seconds without progress before
    the run is declared hung; optimizer: None for the plan's training.optimizer; model: the batch size, input
    shapes and data inputs to check against the plan (its optimizer, profile and groups are not used).

    User training (issue 25): data: a `--data` spec (`tag.deploy.dataset`), None for synthetic data; loss: a
    loss name or ``module:function`` (None: mse); epochs: passes over the data (with data and without steps: 1);
    steps is then the run's total step count (None: 5 without data); lr: None for the plan's training.lr;
    checkpoint: a folder to resume from and save to; export: a .pt or .onnx path for the trained weights."""

    topology_path: str | None = None
    steps: int | None = None
    nproc: int | None = None
    seed: int = 0
    threads: int = 1
    warmup: int = 1
    timeout_s: float = 300.0
    optimizer: str | None = None
    model: ModelOptions = ModelOptions()
    data: str | None = None
    loss: str | None = None
    epochs: int | None = None
    lr: float | None = None
    checkpoint: str | None = None
    export: str | None = None


@dataclass
class Job:
    plan_path: str
    model_path: str
    topology_path: str
    graph: object  # OpGraph
    groups: list[list[int]]  # op indices per group
    strategy: Strategy
    device_ids: list[str]
    device_machines: list[str]
    device_kinds: list[str]  # "gpu" | "cpu" per plan device
    training: TrainingConfig
    steps: int
    nproc: int
    seed: int = 0
    threads: int = 1
    warmup: int = 1
    timeout_s: float = 300.0
    predicted_step_ms: float | None = None  # plan.json's predicted.iteration_ms (the plan's devices, the planner's mode)
    run_dir: str = ""
    extra: dict = field(default_factory=dict)
    data: object = None  # tag.deploy.train.DataSource, None for synthetic data
    loss: str = "mse"  # a loss name or module:function spec (resolved again on each rank)
    start_step: int = 0  # the checkpoint's step this run continues from
    checkpoint: str | None = None
    export: str | None = None
    identity: object = None  # tag.deploy.checkpoint.Identity with a checkpoint
    profile_path: str | None = None  # the plan's profile (`plan_profile`), found and unchanged
    profile_note: str | None = None  # why the plan's profile cannot be used (None: it can, or the plan has none)

    @property
    def batch_size(self) -> int:
        return sum(self.strategy.decisions[0].rows)


def topology_path_of(plan_path: str, given: str | None, how_to_pass: str = "--topology T.json") -> str:
    """The topology file of a plan: `given`, else the plan's topology.path (`resolve_recorded`: as written, else
    beside the plan). how_to_pass: how the verb takes a topology, for the error."""
    if given:
        return given
    from tag.strategy.planfile_read import load_plan_json, resolve_recorded

    raw = load_plan_json(plan_path)
    topo = raw.get("topology") if isinstance(raw.get("topology"), dict) else {}
    path = topo.get("path")
    if not isinstance(path, str) or not path:
        raise InputError(plan_path, "topology.path", f"the path of the plan's topology file (or pass {how_to_pass})",
                         repr(path))
    found = resolve_recorded(path, plan_path)
    if found is None:
        raise InputError(plan_path, "topology.path", f"an existing topology file (or pass {how_to_pass})",
                         repr(path))
    return found


def prepare_job(plan_path: str, model_path: str, options: DeployOptions = DeployOptions(),
                on_step: Callable[[str], None] | None = None) -> Job:
    """Load and check plan, model and topology into a Job (InputError on any mismatch).

    `on_step` is passed to `tag.modelio.load_inputs` (a progress bar over its loading stages).
    """
    from tag.deploy.schedule import build_schedule
    from tag.modelio import load_inputs

    topo = topology_path_of(plan_path, options.topology_path)
    if not os.path.isfile(model_path):
        raise InputError(model_path, "file", "an existing ONNX model", "no such file")
    model = ModelOptions(batch_size=options.model.batch_size, input_shapes=options.model.input_shapes,
                         data_inputs=options.model.data_inputs)
    inp = load_inputs(model_path, topo, model, plan_path=plan_path, on_step=on_step)
    cluster = inp.cluster
    n_dev = cluster.n_devices
    nproc = n_dev if options.nproc is None else options.nproc
    if not 1 <= nproc <= n_dev:
        raise InputError("--nproc", "N", f"a number of ranks in 1..{n_dev} (the plan's devices)", str(nproc))
    training = inp.training
    training = TrainingConfig(optimizer=options.optimizer or training.optimizer,
                              lr=training.lr if options.lr is None else float(options.lr),
                              loss=options.loss or training.loss, precision=training.precision)
    _check_convertible(inp.graph, model_path)
    groups = [list(g.op_ids) for g in inp.gg.groups]
    machines = [d.machine for d in cluster.devices]
    build_schedule(inp.graph, groups, inp.strategy, machines, nproc, plan_file=plan_path)  # SFB checks
    predicted = None
    if inp.plan is not None and isinstance(inp.plan.predicted, dict):
        predicted = inp.plan.predicted.get("iteration_ms")
    batch_rows = sum(inp.strategy.decisions[0].rows)
    user = user_training(options, inp.graph, model_path, plan_path, training, batch_rows)
    profile_path, profile_note = plan_profile(plan_path)
    return Job(plan_path=plan_path, model_path=model_path, topology_path=topo, graph=inp.graph, groups=groups,
               strategy=inp.strategy, device_ids=[d.id for d in cluster.devices], device_machines=machines,
               device_kinds=[d.type.kind for d in cluster.devices], training=training, steps=user.steps,
               nproc=nproc, seed=options.seed, threads=options.threads, warmup=options.warmup,
               timeout_s=float(options.timeout_s), predicted_step_ms=predicted, data=user.data, loss=user.loss,
               start_step=user.start_step, checkpoint=options.checkpoint, export=options.export,
               identity=user.identity, profile_path=profile_path, profile_note=profile_note)


def plan_profile(plan_path: str) -> tuple[str | None, str | None]:
    """(path, None) of the profile a plan records (``profile.path``, `resolve_recorded`) when its sha256
    still matches; (None, why not) when it is missing or changed; (None, None) when the plan records none."""
    from tag.graph.reader import file_sha256
    from tag.strategy.planfile_read import load_plan_json, resolve_recorded

    rec = load_plan_json(plan_path).get("profile")
    if not isinstance(rec, dict) or not isinstance(rec.get("path"), str):
        return None, None
    path = rec["path"]
    found = resolve_recorded(path, plan_path)
    if found is None:
        return None, f"profile {path} recorded in the plan is missing"
    if file_sha256(found) != rec.get("sha256"):
        return None, f"profile {path} changed since the plan was made (sha256 differs): re-run tag plan"
    return found, None


def ranks_strategy(strategy: Strategy, n_devices: int, nproc: int) -> Strategy:
    """The strategy deploy runs on `nproc` ranks, on the plan's devices: each rank's devices (`device_ranks`:
    contiguous blocks of topology order) merged onto the rank's first device (rows added; a ps server, shard
    positions and stage devices moved there), the others idle. A group left on one device keeps no sync and no
    ZeRO stage. The plan's own strategy when `nproc` equals its devices.

    >>> from tag.strategy import Decision
    >>> s = ranks_strategy(Strategy((Decision((8, 8, 8, 8), sync="ring"), Decision((0, 0, 16, 16), sync="ps",
    ...                    server=3))), 4, 2)
    >>> [(d.rows, d.sync, d.server) for d in s.decisions]
    [((16, 0, 16, 0), 'ring', None), ((0, 0, 32, 0), None, None)]
    """
    import dataclasses

    from tag.deploy.ranks import device_ranks

    if nproc >= n_devices:
        return strategy
    dev_rank = device_ranks(n_devices, nproc)
    lead = [dev_rank.index(dev_rank[d]) for d in range(n_devices)]
    decisions = []
    for dec in strategy.decisions:
        rows = [0] * n_devices
        for d, r in enumerate(dec.rows):
            rows[lead[d]] += r
        shard = dec.shard
        if shard is not None:
            shard = dataclasses.replace(shard, replicas=tuple(tuple(lead[d] for d in rep) for rep in shard.replicas))
        kept = dataclasses.replace(dec, rows=tuple(rows), shard=shard)
        if not kept.replicated:
            kept = dataclasses.replace(kept, sync=None, server=None, zero=0)
        elif kept.server is not None:
            kept = dataclasses.replace(kept, server=lead[kept.server])
        decisions.append(kept)
    pipeline = strategy.pipeline
    if pipeline is not None:
        stages = tuple(dataclasses.replace(st, devices=tuple(sorted({lead[d] for d in st.devices})))
                       for st in pipeline.stages)
        pipeline = dataclasses.replace(pipeline, stages=stages)
    buckets = strategy.buckets
    if buckets is not None:
        buckets = tuple(dataclasses.replace(b, server=None if b.server is None else lead[b.server]) for b in buckets
                        if b.groups and decisions[b.groups[0]].replicated)  # a bucket's groups share one replica set
    return dataclasses.replace(strategy, decisions=tuple(decisions), pipeline=pipeline, buckets=buckets)


@dataclass(frozen=True)
class UserTraining:
    """The resolved user-training settings of a job (see `user_training`)."""

    steps: int
    data: object  # DataSource | None
    loss: str
    start_step: int
    identity: object  # checkpoint Identity | None


def user_training(options: DeployOptions, graph, model_path: str, plan_path: str, training: TrainingConfig,
                  batch_rows: int) -> UserTraining:
    """Check --data/--loss/--steps/--epochs/--checkpoint/--export and resolve them (InputError on bad input).

    The dataset factory is called here once, so a bad spec, a dataset that does not fit the model or labels
    out of range stop the run before any rank starts.
    """
    from tag.deploy.checkpoint import Identity, file_sha256, resume_step
    from tag.deploy.dataset import absolute_spec, check_dataset, data_shapes, make_dataset, resolve_loss
    from tag.deploy.sampler import EpochOrder
    from tag.deploy.train import DataSource
    from tag.fileio import check_output_path

    if options.steps is not None and options.epochs is not None:
        raise InputError("--epochs", "N", "either --epochs or --steps (--steps is the total step count)",
                         f"--epochs {options.epochs} with --steps {options.steps}")
    for flag, value in (("--steps", options.steps), ("--epochs", options.epochs)):
        if value is not None and value < 1:
            raise InputError(flag, "N", "a positive integer", str(value))
    loss_spec = options.loss or training.loss or "mse"
    loss = resolve_loss(loss_spec)
    data = None
    if options.data is None:
        if loss_spec != "mse":
            raise InputError("--loss", loss_spec, "mse without --data (synthetic targets are standard normal)",
                             loss_spec)
        if options.epochs is not None:
            raise InputError("--epochs", "N", "--data to count epochs of (or --steps)", str(options.epochs))
        steps = 5 if options.steps is None else options.steps
    else:
        spec = absolute_spec(options.data)
        shapes = data_shapes(graph, model_path)
        ds = make_dataset(spec)
        check_dataset(ds, shapes, loss, batch_rows, options.data)
        data = DataSource(spec, shapes, EpochOrder(len(ds), batch_rows, options.seed))
        steps = options.steps if options.steps is not None else (options.epochs or 1) * data.order.steps_per_epoch
    if options.export is not None:
        if not options.export.endswith((".pt", ".pth", ".onnx")):
            raise InputError("--export", options.export, "a path ending in .pt, .pth or .onnx", options.export)
        check_output_path(options.export, "--export", inputs=[model_path, plan_path])
    identity = None
    start = 0
    if options.checkpoint is not None:
        identity = Identity(model_sha256=file_sha256(model_path), plan_sha256=file_sha256(plan_path),
                            optimizer=training.optimizer, lr=training.lr, seed=options.seed, loss=loss_spec,
                            data=options.data, dataset_rows=None if data is None else data.order.n_rows,
                            batch_rows=batch_rows)
        start = resume_step(options.checkpoint, identity, steps)
    if loss.fn is not None:
        loss_spec = absolute_spec(loss_spec)
    return UserTraining(steps, data, loss_spec, start, identity)


def user_training_flags(job: Job) -> list[str]:
    """The worker flags that repeat a job's user-training settings (multi-node launch commands)."""
    flags = ["--lr", repr(job.training.lr), "--loss", job.loss]
    if job.data is not None:
        flags += ["--data", job.data.spec]
    for flag, value in (("--checkpoint", job.checkpoint), ("--export", job.export)):
        if value:
            flags += [flag, value]
    return flags


def _check_convertible(graph, model_path: str) -> None:
    """InputError naming the first op the ONNX-to-torch converter cannot run (before any rank starts)."""
    from tag.deploy.onnx_torch import CONVERTERS

    for op in graph.ops:
        if op.domain not in ("", "ai.onnx") or op.op_type not in CONVERTERS:
            found = op.op_type if op.domain in ("", "ai.onnx") else f"{op.domain}::{op.op_type}"
            raise InputError(model_path, f"node '{op.name}' ({op.op_type})", "an op type the converter supports", found)


def save_job(job: Job, path: str) -> None:
    with open(path, "wb") as f:
        pickle.dump(job, f)


def load_job(path: str) -> Job:
    with open(path, "rb") as f:
        return pickle.load(f)
