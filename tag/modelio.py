"""Turn a model path, a topology path and typed model options into loaded inputs (no command-line types here).

Used by every verb that reads a model (through `tag.cli.inputs`, which builds `ModelOptions` from the flags), by
`tag.deploy.job.prepare_job` and by the benchmarks. With a plan, the plan decides the batch, the input shapes,
the training settings and the op groups (validated against the files; never re-coarsened); without one, the
options do and the model is coarsened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from tag.errors import InputError
from tag.strategy import Strategy, TrainingConfig

LOAD_STAGES = 4  # calls of `on_step` per `load_inputs`: topology, model, groups (or plan check), cost model


@dataclass(frozen=True)
class ModelOptions:
    """How to read a model without a plan (with a plan, batch and shapes must agree with it).

    batch_size: global batch in samples (None: the model file's); input_shapes: {input name: dims} overriding the
    file's shapes; data_inputs: inputs that carry the batch (empty: detected); optimizer: None for "adam" (with a
    plan: the plan's); profile: a `tag profile ops` database path (None: the roofline cost model); groups: the
    number of op groups to coarsen to (None: automatic); precision: the training precision
    (`tag.strategy.memory_decisions.PRECISIONS`; None: fp32, or with a plan the plan's).
    """

    batch_size: int | None = None
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    data_inputs: tuple[str, ...] = ()
    optimizer: str | None = None
    profile: str | None = None
    groups: int | None = None
    precision: str | None = None

    def training(self) -> TrainingConfig:
        """The TrainingConfig these options ask for (the optimizer and precision; lr and loss at their defaults)."""
        return TrainingConfig(optimizer=self.optimizer or "adam", precision=self.precision or "fp32")


@dataclass
class Inputs:
    """Everything a verb needs to simulate, search or deploy (graph: OpGraph, gg: GroupGraph, cluster: Cluster)."""

    model_path: str
    topology_path: str
    graph: object
    gg: object
    cluster: object
    cost: object
    training: TrainingConfig
    batch_size: int
    strategy: Strategy | None = None  # the plan's strategy when loaded with a plan
    plan: object | None = None  # PlanMeta when loaded with a plan


def measured_ring_gbps(topology_path, fit=None) -> float | None:
    """The ring all-reduce rate `tag profile links` measured into this topology file (None if it has none); with
    `fit`, that reader of the file's measurement instead (e.g. `tag.profile.links.collective_step_us`)."""
    import json

    from tag.profile.links import collective_hop_gbps

    with open(topology_path) as f:
        raw = json.load(f)
    try:
        return (fit or collective_hop_gbps)(raw) if isinstance(raw, dict) else None
    except (AttributeError, KeyError, TypeError, ValueError):  # a malformed x-measured block: the links' rate applies
        return None


def cost_model_for(gg, training: TrainingConfig, topology_path, profile: str | None = None):
    """The cost model of `gg` under `training` (its precision): roofline, or measured op times from `profile` with
    the collective rates `tag profile links` measured into the topology file."""
    from tag.cost import make_cost_model
    from tag.profile.links import collective_step_us

    return make_cost_model(gg, training, profile=profile,
                           collective_gbps=measured_ring_gbps(topology_path) if profile else None,
                           collective_step_us=measured_ring_gbps(topology_path, collective_step_us) if profile else None)


def load_inputs(model_path: str, topology_path: str, options: ModelOptions = ModelOptions(),
                plan_path: str | None = None, on_step: Callable[[str], None] | None = None) -> Inputs:
    """Load topology, model, groups and cost model from the paths and `options`.

    With `plan_path`, the plan is checked against both files first (hashes before anything is loaded, then
    device ids, rows, op names, sync; see `tag.strategy.plancheck.validate_plan`), and a batch size or input
    shape in `options` that contradicts the plan is an InputError. `on_step(stage)` is called after each of
    the `LOAD_STAGES` stages with the stage's name (a progress bar).
    """
    from tag.graph import load_model
    from tag.topology import load_topology

    step = on_step or (lambda stage: None)
    cluster = load_topology(topology_path)
    if options.precision is not None:
        from tag.strategy.memory_decisions import check_precision_supported

        check_precision_supported(cluster, options.precision, str(topology_path), "--precision")
    step("topology")
    shapes = dict(options.input_shapes)
    batch = options.batch_size
    data_inputs = list(options.data_inputs)
    if batch is not None and batch <= 0:
        raise InputError("--batch-size", "B", "a positive integer", str(batch))
    if plan_path is None:
        from tag.graph.coarsen import coarsen

        training = options.training()
        graph = load_model(model_path, data_inputs=data_inputs, input_shapes=shapes, batch_size=batch,
                           n_devices=cluster.n_devices)
        step("model")
        gg = coarsen(graph, k=options.groups, n_devices=cluster.n_devices)
        step("groups")
        strategy = meta = None
    else:
        from tag.strategy.plancheck import check_plan_hashes, validate_plan
        from tag.strategy.planfile_read import load_plan_json, parse_plan

        raw = load_plan_json(plan_path)
        check_plan_hashes(raw, plan_path, model_path, topology_path)
        _, meta = parse_plan(raw, plan_path, cluster)
        if batch is not None and batch != meta.batch_size:
            raise InputError(plan_path, "model.batch_size", f"--batch-size {batch} as given on the command line",
                             str(meta.batch_size))
        for name, dims in shapes.items():
            if name in meta.input_shapes and tuple(meta.input_shapes[name]) != tuple(dims):
                raise InputError(plan_path, f"model.input_shapes.{name}", "x".join(map(str, dims)),
                                 "x".join(map(str, meta.input_shapes[name])))
        shapes = {**meta.input_shapes, **shapes}
        training = meta.training
        if options.precision is not None and options.precision != training.precision:
            raise InputError(plan_path, "training.precision", f"--precision {options.precision} as given on the "
                             "command line", training.precision)
        graph = load_model(model_path, data_inputs=data_inputs, input_shapes=shapes, batch_size=meta.batch_size,
                           n_devices=cluster.n_devices)
        step("model")
        strategy, gg, meta = validate_plan(raw, graph, None, cluster, model_path, topology_path, plan_path=plan_path)
        step("plan check")
    cost = cost_model_for(gg, training, topology_path, options.profile)
    step("cost model")
    return Inputs(model_path=str(model_path), topology_path=str(topology_path), graph=graph, gg=gg,
                  cluster=cluster, cost=cost, training=training, batch_size=graph.batch_size,
                  strategy=strategy, plan=meta)
