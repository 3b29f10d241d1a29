"""The one place the CLI turns a model path, a topology path and flags into loaded inputs.

Used by `tag simulate`, `tag plan`, `tag bench` and `tag deploy`. With a plan, the plan decides the
batch, the input shapes, the training settings and the op groups (validated against the files; never
re-coarsened); without one, the flags do and the model is coarsened.
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.errors import InputError
from tag.strategy import Strategy, TrainingConfig


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


def training_from_args(args) -> TrainingConfig:
    """The TrainingConfig the flags ask for (--optimizer; lr and loss at their defaults)."""
    return TrainingConfig(optimizer=getattr(args, "optimizer", None) or "adam")


def measured_ring_gbps(topology_path) -> float | None:
    """The ring all-reduce rate `tag profile links` measured into this topology file (None if it has none)."""
    import json

    from tag.profile.links import collective_hop_gbps

    with open(topology_path) as f:
        raw = json.load(f)
    try:
        return collective_hop_gbps(raw) if isinstance(raw, dict) else None
    except (AttributeError, KeyError, TypeError, ValueError):  # a malformed x-measured block: the links' rate applies
        return None


def load_inputs(model_path: str, topology_path: str, args, plan_path: str | None = None) -> Inputs:
    """Load topology, model, groups and cost model from the paths and the model flags on `args`.

    Flags read from `args` (all optional): batch_size, input_shape, data_input, optimizer, profile,
    groups. With `plan_path`, the plan is checked against both files first (hashes before anything is
    loaded, then device ids, rows, op names, sync; see `tag.strategy.plancheck.validate_plan`), and a
    --batch-size or --input-shape that contradicts the plan is an InputError.
    """
    from tag.cli.util import parse_input_shapes, progress

    with progress(total=4, desc="loading", unit="step") as bar:
        return _load(model_path, topology_path, args, plan_path, bar, parse_input_shapes)


def _load(model_path, topology_path, args, plan_path, bar, parse_input_shapes) -> Inputs:
    from tag.cost import make_cost_model
    from tag.graph import load_model
    from tag.topology import load_topology

    def step(what: str) -> None:
        bar.set_description(what)
        bar.update(1)

    cluster = load_topology(topology_path)
    step("model")
    shapes = parse_input_shapes(getattr(args, "input_shape", None) or [])
    batch = getattr(args, "batch_size", None)
    data_inputs = list(getattr(args, "data_input", None) or [])
    if batch is not None and batch <= 0:
        raise InputError("--batch-size", "B", "a positive integer", str(batch))
    if plan_path is None:
        from tag.graph.coarsen import coarsen

        training = training_from_args(args)
        graph = load_model(model_path, data_inputs=data_inputs, input_shapes=shapes, batch_size=batch,
                           n_devices=cluster.n_devices)
        step("groups")
        gg = coarsen(graph, k=getattr(args, "groups", None), n_devices=cluster.n_devices)
        strategy = meta = None
    else:
        from tag.strategy.plancheck import check_plan_hashes, validate_plan
        from tag.strategy.planfile import load_plan_json, parse_plan

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
        graph = load_model(model_path, data_inputs=data_inputs, input_shapes=shapes, batch_size=meta.batch_size,
                           n_devices=cluster.n_devices)
        step("plan check")
        strategy, gg, meta = validate_plan(raw, graph, None, cluster, model_path, topology_path, plan_path=plan_path)
    step("cost model")
    profile = getattr(args, "profile", None)
    cost = make_cost_model(gg, training, profile=profile,
                           collective_gbps=measured_ring_gbps(topology_path) if profile else None)
    bar.update(1)
    return Inputs(model_path=str(model_path), topology_path=str(topology_path), graph=graph, gg=gg,
                  cluster=cluster, cost=cost, training=training, batch_size=graph.batch_size,
                  strategy=strategy, plan=meta)
