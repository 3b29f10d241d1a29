"""plan.json version 2 pipelines (docs/plan.md § stages): writing, reading and checking ``stages``,
``micro_batches``, ``schedule`` and ``k``.

A pipelined plan has, at its top level::

    "stages": [{"groups": [0, 1], "devices": ["m0/0", "m0/1"]}, {"groups": [2], "devices": ["m1/0"]}],
    "micro_batches": 8, "schedule": "1f1b", "k": 1

and a plan without a pipeline has none of these keys (not ``micro_batches: 1``). `parse_pipeline` checks what the
file alone can say (each group in exactly one stage, stages on disjoint known devices, every group's rows on its
stage's devices, rows divisible into m micro-batches of at least one row per replica, the schedule and its k);
`check_pipeline_graph` checks what needs the model (every edge of the group graph goes from a stage to itself or a
later one; no training-mode BatchNormalization with m > 1, whose batch statistics over a micro-batch would differ
from the whole batch's). Each failure is an `InputError` naming the plan file and the JSON path.
"""

from __future__ import annotations

from tag.errors import InputError, short_repr
from tag.graph.op_families import is_training_batchnorm
from tag.strategy import Decision
from tag.strategy.pipeline import SCHEDULES, Pipeline, Stage

PIPELINE_KEYS = ("stages", "micro_batches", "schedule", "k")


def pipeline_to_json(pipeline: Pipeline | None, device_ids) -> dict:
    """The top-level plan keys of `pipeline` (device indices written as `device_ids`); {} without a pipeline.

    >>> pipeline_to_json(Pipeline((Stage((0,), (1,)), Stage((1,), (0,))), 4, "kfkb", 2), ["m0/0", "m0/1"])
    {'stages': [{'groups': [0], 'devices': ['m0/1']}, {'groups': [1], 'devices': ['m0/0']}], 'micro_batches': 4, \
'schedule': 'kfkb', 'k': 2}
    """
    if pipeline is None:
        return {}
    return {"stages": [{"groups": [int(g) for g in st.groups], "devices": [device_ids[d] for d in st.devices]}
                       for st in pipeline.stages],
            "micro_batches": int(pipeline.micro_batches), "schedule": pipeline.schedule, "k": int(pipeline.k)}


def stage_device_lists(raw: dict) -> list[list[str]]:
    """Each stage's device ids as written (lists of strings only), for ordering devices without a cluster."""
    stages = raw.get("stages")
    if not isinstance(stages, list):
        return []
    out = []
    for st in stages:
        devs = st.get("devices") if isinstance(st, dict) else None
        if isinstance(devs, list) and all(isinstance(d, str) for d in devs):
            out.append(list(devs))
    return out


def parse_pipeline(raw: dict, path: str, decisions: list[Decision], positions: list[int],
                   index: dict[str, int]) -> Pipeline | None:
    """The Pipeline of a version-2 plan object, or None when it has no ``stages``.

    decisions[g] is group g's decision (rows over the device indices of `index`, device id -> index);
    positions[g] is its index in ``raw["decisions"]`` (for JSON paths). Checks, in order: the stages' structure
    (non-empty ``groups`` and ``devices``, known device ids, each group in exactly one stage, each device in at
    most one), ``micro_batches`` (an integer >= 1), ``schedule``, ``k``, then every group's rows against its
    stage: only on the stage's devices, each device's rows r >= m and a multiple of m (micro-batch j gives
    device d rows[d] / m rows, `tag.strategy.pipeline.micro_rows`).
    """
    if "stages" not in raw:
        extra = [key for key in PIPELINE_KEYS[1:] if key in raw]
        if extra:
            raise InputError(path, "stages", f"a list of stages when {extra[0]} is given (a plan without a "
                             "pipeline has none of stages, micro_batches, schedule, k)", "no stages")
        return None
    n_groups = len(decisions)
    stages = _parse_stages(raw["stages"], path, n_groups, index)
    m = raw.get("micro_batches")
    if not _is_int(m) or m < 1:
        raise InputError(path, "micro_batches", "an integer >= 1 (the number of micro-batches)", short_repr(m))
    schedule = raw.get("schedule", "1f1b")
    if schedule not in SCHEDULES:
        raise InputError(path, "schedule", "one of " + ", ".join(SCHEDULES), short_repr(schedule))
    k = raw.get("k", 1)
    if not _is_int(k) or k < 1:
        raise InputError(path, "k", "an integer >= 1 (micro-batches per kfkb unit)", short_repr(k))
    if k != 1 and schedule != "kfkb":
        raise InputError(path, "k", f"1 with schedule {schedule!r} (k > 1 needs schedule kfkb)", str(k))
    if m % k:
        raise InputError(path, "k", f"a divisor of micro_batches {m}", str(k))
    pipeline = Pipeline(stages, m, schedule, k)
    _check_rows(pipeline, path, decisions, positions, list(index))
    return pipeline


def _parse_stages(slist, path: str, n_groups: int, index: dict[str, int]) -> tuple[Stage, ...]:
    if not isinstance(slist, list) or not slist:
        raise InputError(path, "stages", "a non-empty list of stages", short_repr(slist))
    stage_of_group: dict[int, int] = {}
    stage_of_device: dict[str, int] = {}
    out = []
    for s, st in enumerate(slist):
        where = f"stages[{s}]"
        if not isinstance(st, dict):
            raise InputError(path, where, "an object with groups and devices", short_repr(st))
        gs = st.get("groups")
        if not isinstance(gs, list) or not gs:
            raise InputError(path, f"{where}.groups", "a non-empty list of group ids (an empty stage runs nothing)",
                             short_repr(gs))
        for j, g in enumerate(gs):
            if not (_is_int(g) and 0 <= g < n_groups):
                raise InputError(path, f"{where}.groups[{j}]", f"a group id in 0..{n_groups - 1}", short_repr(g))
            if g in stage_of_group:
                other = stage_of_group[g]
                also = "twice in this stage" if other == s else f"also in stages[{other}]"
                raise InputError(path, f"{where}.groups[{j}]", "each group in exactly one stage",
                                 f"group {g} {also}")
            stage_of_group[g] = s
        devs = st.get("devices")
        if not isinstance(devs, list) or not devs:
            raise InputError(path, f"{where}.devices", "a non-empty list of device ids", short_repr(devs))
        for j, dev in enumerate(devs):
            if not isinstance(dev, str) or dev not in index:
                raise InputError(path, f"{where}.devices[{j}]", "a device id of the topology", short_repr(dev))
            if dev in stage_of_device:
                other = stage_of_device[dev]
                also = "twice in this stage" if other == s else f"also in stages[{other}]"
                raise InputError(path, f"{where}.devices[{j}]", "each device in at most one stage",
                                 f"{dev!r} {also}")
            stage_of_device[dev] = s
        out.append(Stage(tuple(sorted(gs)), tuple(sorted(index[d] for d in devs))))
    missing = [g for g in range(n_groups) if g not in stage_of_group]
    if missing:
        raise InputError(path, "stages", "every group in exactly one stage",
                         f"group {missing[0]} in no stage" + (f" ({len(missing)} groups missing)"
                                                             if len(missing) > 1 else ""))
    return tuple(out)


def _check_rows(pipeline: Pipeline, path: str, decisions: list[Decision], positions: list[int],
                device_ids: list[str]) -> None:
    """Every group's rows on its stage's devices, each at least m and a multiple of m."""
    m = pipeline.micro_batches
    stage_of = pipeline.stage_of_group()
    for g, dec in enumerate(decisions):
        s = stage_of[g]
        allowed = set(pipeline.stages[s].devices)
        for d in dec.devices:
            if d not in allowed:
                names = ", ".join(device_ids[x] for x in pipeline.stages[s].devices)
                raise InputError(path, f"decisions[{positions[g]}].rows.{device_ids[d]}",
                                 f"rows only on the devices of stages[{s}] (group {g}'s stage: {names})",
                                 short_repr(device_ids[d]))
    fewest = min(((r, g, d) for g, dec in enumerate(decisions) for d, r in enumerate(dec.rows) if r > 0),
                 default=None)
    if fewest is not None and fewest[0] < m:
        r, g, d = fewest
        raise InputError(path, "micro_batches", f"at most {r}: decisions[{positions[g]}].rows.{device_ids[d]} has "
                         f"{r} rows, and every replica needs at least one row per micro-batch", str(m))
    for g, dec in enumerate(decisions):
        for d in dec.devices:
            if dec.rows[d] % m:
                raise InputError(path, f"decisions[{positions[g]}].rows.{device_ids[d]}",
                                 f"a multiple of micro_batches {m} (each micro-batch runs rows / {m} on the device)",
                                 str(dec.rows[d]))


def check_pipeline_graph(path: str, pipeline: Pipeline, gg) -> None:
    """The pipeline against the model's group graph `gg`: no edge from a later stage to an earlier one (an acyclic
    cut), and no training-mode BatchNormalization when micro_batches > 1."""
    stage_of = pipeline.stage_of_group()
    for e in sorted(gg.edges, key=lambda e: (e.dst, e.src)):
        if stage_of[e.src] > stage_of[e.dst]:
            s = stage_of[e.dst]
            raise InputError(path, f"stages[{s}].groups", "groups whose inputs come from their own stage or an "
                             "earlier one (an acyclic cut)", f"group {e.dst} consumes group {e.src}'s output, "
                             f"computed later in stages[{stage_of[e.src]}]")
    if pipeline.micro_batches > 1:
        for group in gg.groups:
            for i in group.op_ids:
                op = gg.graph.ops[i]
                if is_training_batchnorm(op):
                    raise InputError(path, "micro_batches", f"1 for a model with training-mode BatchNormalization "
                                     f"({op.name!r}): its batch statistics over a micro-batch differ from the whole "
                                     "batch's; set micro_batches to 1 or export the model in inference mode",
                                     str(pipeline.micro_batches))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
