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
    shapes and data inputs to check against the plan (its optimizer, profile and groups are not used)."""

    topology_path: str | None = None
    steps: int = 5
    nproc: int | None = None
    seed: int = 0
    threads: int = 1
    warmup: int = 1
    timeout_s: float = 300.0
    optimizer: str | None = None
    model: ModelOptions = ModelOptions()


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
    predicted_step_ms: float | None = None
    run_dir: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return sum(self.strategy.decisions[0].rows)


def topology_path_of(plan_path: str, given: str | None) -> str:
    """The topology file of a plan: `given`, else the plan's topology.path (as written, or beside the plan)."""
    if given:
        return given
    from tag.strategy.planfile import load_plan_json

    raw = load_plan_json(plan_path)
    topo = raw.get("topology") if isinstance(raw.get("topology"), dict) else {}
    path = topo.get("path")
    if not isinstance(path, str) or not path:
        raise InputError(plan_path, "topology.path", "the path of the plan's topology file (or pass --topology)",
                         repr(path))
    for cand in (path, os.path.join(os.path.dirname(os.path.abspath(plan_path)), path)):
        if os.path.isfile(cand):
            return cand
    raise InputError(plan_path, "topology.path", "an existing topology file (or pass --topology T.json)", repr(path))


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
    if options.steps < 1:
        raise InputError("--steps", "N", "a positive integer", str(options.steps))
    nproc = n_dev if options.nproc is None else options.nproc
    if not 1 <= nproc <= n_dev:
        raise InputError("--nproc", "N", f"a number of ranks in 1..{n_dev} (the plan's devices)", str(nproc))
    training = inp.training
    opt = options.optimizer
    if opt and opt != training.optimizer:
        training = TrainingConfig(optimizer=opt, lr=training.lr, loss=training.loss, precision=training.precision)
    _check_convertible(inp.graph, model_path)
    groups = [list(g.op_ids) for g in inp.gg.groups]
    machines = [d.machine for d in cluster.devices]
    build_schedule(inp.graph, groups, inp.strategy, machines, nproc, plan_file=plan_path)  # SFB checks
    predicted = None
    if inp.plan is not None and isinstance(inp.plan.predicted, dict):
        predicted = inp.plan.predicted.get("iteration_ms")
    return Job(plan_path=plan_path, model_path=model_path, topology_path=topo, graph=inp.graph, groups=groups,
               strategy=inp.strategy, device_ids=[d.id for d in cluster.devices], device_machines=machines,
               device_kinds=[d.type.kind for d in cluster.devices], training=training, steps=options.steps,
               nproc=nproc, seed=options.seed, threads=options.threads, warmup=options.warmup,
               timeout_s=float(options.timeout_s), predicted_step_ms=predicted)


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
