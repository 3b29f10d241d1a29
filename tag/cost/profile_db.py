"""The profile database: measured op times per (op signature, device type, rows), as JSON.

Format (version 1), written by `tag profile ops` and read by `tag.cost.make_cost_model(..., profile=path)`::

    {
      "version": 1,
      "device_type": "cpu",              # DeviceType.name the measurements hold for
      "threads": 1,                      # intra-op threads used while measuring
      "machine": {"cpu": "...", "torch": "2.13.0"},   # free-form provenance
      "ops": {
        "<signature>": {"rows": [1, 2, 4, 8], "fwd_ms": [0.10, 0.18, 0.33, 0.64],
                         "bwd_ms": [0.21, 0.37, 0.70, 1.35]}
      },
      "dispatch_ms": 0.004,              # optional: per-op launch/dispatch overhead estimate
      "cpu_quota_cores": 0.5,            # optional: the CFS CPU quota the thread-clock times were taken under
      "settings": {"warmup": 2, ...},    # optional: how the figures were measured (free-form)
      "groups": [                         # optional: measured group-level runs
        {"ops": ["/conv1/Conv", "/relu/Relu"], "rows": [1, 2], "fwd_ms": [..], "bwd_ms": [..],
         "ops_fwd_ms": [..], "ops_bwd_ms": [..]}   # ops_*: the sum of the group's per-op figures
      ],
      "step": {                           # optional: the deploy runtime's step on one rank (`tag.profile.step`)
        "optimizer": "adam", "rows": [1, 2],
        "groups": [{"ops": [..], "fwd_ms": [..], "bwd_ms": [..],   # per group, in the step, per row count
                    "update_ms": 0.4, "param_bytes": 1048576}],   # the optimizer step over its parameters
        "update_ms": [..], "other_ms": [..],   # per row count: the step's optimizer step; the rest of the step
        "copy_bytes": [..], "copy_in_ms": [..], "copy_out_ms": [..],  # sync bucket memory work before / after the collective, by bucket bytes
        "fill_ms": [..]                   # optional: allocating a fresh zeroed buffer of each copy_bytes size (ZeRO's)
      },
      "contention": {                     # optional: ranks at once on this machine (`tag.profile.contention`)
        "clock": "thread", "ranks": 2, "rows": 32,   # op times' clock; probe ranks; rows each stepped
        "handoff_ms": 0.2, "alone_stretch": 1.01, "together_stretch": 1.03,   # wall / CPU of compute
        "together_speed": 1.1,            # the model's step CPU ms with every rank stepping at once / alone
        "alone_step_ms": 30.1, "together_step_ms": 33.1,  # the two step figures behind together_speed; the
                                          # first over the step block's step at these rows is the rank speed
        "call_ms": {"allreduce": 0.8, "p2p": 0.6},  # optional: one small collective call after compute, by kind
        "cores": 2                        # optional: the cores the probe's processes could use
      }
    }

A **profile set** (a heterogeneous cluster) is ``{"version": 1, "profiles": [<profile>, ...]}``: one such object per
device type, each measured on a machine of its type (`load_all`; the cost model then takes each device's figures from
its type's profile, `tag.cost.profiled.MultiProfileCostModel`).

``rows`` is strictly increasing and positive; ``fwd_ms`` and ``bwd_ms`` have one non-negative time per
row count (``bwd_ms`` may be omitted: the cost model then uses the roofline's backward for that op).
A signature is ``op_type|input shapes per row|attribute hash`` (see `op_signature`): the batch axis of
a batched input is written ``N``, so the same op at any batch has one signature.

``cpu_quota_cores`` (optional; `tag.profile.quota`): a container's CPU limit in cores, recorded with thread-clock
times (which do not count throttled periods); below 1 the cost model divides every compute and update time on the
profile's device type by it (`tag.cost.profiled`).

``contention`` (optional) holds what the machine does to ranks running at once (`tag.cost.contention`, where the
formulas are); ``clock`` says whether every time in the file is thread CPU time (``thread``: one-thread CPU ranks)
or wall time (``wall``).

``groups[i].ops`` names the group's compute ops (`Op.name`, in graph order). ``dispatch_ms``,
``settings``, ``groups`` and ``step`` are optional (files without them stay valid). With ``step`` the cost
model (`tag.cost.profiled`) scales every op of a step group by that group's in-step / per-op-sum ratio,
takes optimizer updates and sync copies from it; ``copy_bytes`` may be empty (a model without parameters).

Between measured row counts times are interpolated linearly; beyond the last they are extrapolated
linearly from the last two (below the first, from the first two); with one measurement the time
scales in proportion to rows. Results are clamped at 0.
"""

from __future__ import annotations

import hashlib
import json

from tag.cost.contention import ContentionTerms, rank_speed
from tag.cost.profile_types import (GroupProfile, OpProfile, ProfileDB, StepGroup, StepProfile,  # noqa: F401
                                    interpolate, quota_scale, step_block_ms)  # (the types and figures, re-exported)
from tag.errors import InputError, short_repr
from tag.fileio import write_text_atomic

VERSION = 1


def attrs_hash(attrs: dict) -> str:
    """First 8 hex digits of the SHA-1 of the attributes as canonical JSON (values via str if needed)."""
    text = json.dumps(attrs or {}, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def op_signature(op, graph) -> str:
    """Signature of an `Op` of an `OpGraph`: ``op_type|shape,shape,...|attrs_hash``.

    Each input's shape is written ``AxBxC``, with its batch axis as ``N``; an unknown shape is ``?`` and
    an empty input name ``-``.

    >>> # 'Conv|Nx3x224x224,64x3x7x7|1f0c2a9b'
    """
    parts = []
    for name in op.inputs:
        t = graph.tensors.get(name) if name else None
        if t is None or t.shape is None:
            parts.append("-" if not name else "?")
            continue
        dims = ["N" if i == t.batch_axis else str(d) for i, d in enumerate(t.shape)]
        parts.append("x".join(dims) if dims else "scalar")
    return f"{op.op_type}|{','.join(parts)}|{attrs_hash(op.attrs)}"


def _check_series(path: str, where: str, value, n: int | None, kind: str) -> list:
    if not isinstance(value, list) or not value or (n is not None and len(value) != n):
        exp = f"a non-empty list{'' if n is None else f' of {n} numbers'}"
        raise InputError(path, where, exp, short_repr(value))
    for i, v in enumerate(value):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and (kind != "rows" or (isinstance(v, int) and v > 0))
        if not ok:
            raise InputError(path, f"{where}[{i}]", "a positive integer" if kind == "rows" else "a non-negative number", short_repr(v))
    if kind == "rows" and any(b <= a for a, b in zip(value, value[1:])):
        raise InputError(path, where, "strictly increasing row counts", short_repr(value))
    return list(value)


def from_json(obj: dict, path: str = "<profile>") -> ProfileDB:
    """Validate a parsed profile object and build a `ProfileDB` (InputError on bad input)."""
    if not isinstance(obj, dict):
        raise InputError(path, "$", "a JSON object", short_repr(obj))
    if obj.get("version") != VERSION:
        raise InputError(path, "version", f"{VERSION}", short_repr(obj.get("version")))
    dt = obj.get("device_type")
    if not isinstance(dt, str) or not dt:
        raise InputError(path, "device_type", "a device type name", short_repr(dt))
    threads = _positive_int(path, "threads", obj.get("threads", 1))
    ops_obj = obj.get("ops", {})
    if not isinstance(ops_obj, dict):
        raise InputError(path, "ops", "an object of signature -> measurements", short_repr(ops_obj))
    ops: dict[str, OpProfile] = {}
    for sig, entry in ops_obj.items():
        where = f"ops[{json.dumps(sig)}]"
        if not isinstance(entry, dict):
            raise InputError(path, where, "an object with rows and fwd_ms", short_repr(entry))
        rows = _check_series(path, f"{where}.rows", entry.get("rows"), None, "rows")
        fwd = _check_series(path, f"{where}.fwd_ms", entry.get("fwd_ms"), len(rows), "ms")
        bwd = entry.get("bwd_ms")
        if bwd is not None:
            bwd = _check_series(path, f"{where}.bwd_ms", bwd, len(rows), "ms")
        ops[sig] = OpProfile(rows, [float(v) for v in fwd], None if bwd is None else [float(v) for v in bwd])
    machine = obj.get("machine", {})
    groups = [_group_from_json(path, f"groups[{i}]", g) for i, g in enumerate(_list(path, "groups", obj.get("groups", [])))]
    dispatch = obj.get("dispatch_ms")
    if dispatch is not None and (isinstance(dispatch, bool) or not isinstance(dispatch, (int, float)) or dispatch < 0):
        raise InputError(path, "dispatch_ms", "a non-negative number", short_repr(dispatch))
    settings = obj.get("settings", {})
    step = None if obj.get("step") is None else _step_from_json(path, "step", obj["step"])
    quota = obj.get("cpu_quota_cores")
    if quota is not None and (isinstance(quota, bool) or not isinstance(quota, (int, float)) or not quota > 0):
        raise InputError(path, "cpu_quota_cores", "a positive number of cores (or no key: no CPU quota)",
                         short_repr(quota))
    raw = obj.get("contention")
    terms = None if raw is None else contention_from_json(path, "contention", raw, step, quota)
    return ProfileDB(dt, threads, machine if isinstance(machine, dict) else {}, ops, path, groups,
                     None if dispatch is None else float(dispatch), settings if isinstance(settings, dict) else {}, step,
                     terms, dict(raw) if terms is not None else {}, None if quota is None else float(quota))


CLOCKS = ("thread", "wall")
CALL_KINDS = ("allreduce", "p2p")  # `tag.sim.cpu_calls.cpu_call_kind`


def contention_from_json(path: str, where: str, c, step: StepProfile | None = None,
                         cpu_quota_cores: float | None = None) -> ContentionTerms:
    """The `ContentionTerms` of a profile's ``contention`` block (InputError naming `path` and the key if bad); with
    the profile's `step` block, the rank speed of its ``alone_step_ms`` (`tag.cost.contention.rank_speed`); with its
    CPU quota, the `quota_scale` its stretches hold."""
    if not isinstance(c, dict):
        raise InputError(path, where, "an object with ranks, rows, handoff_ms, alone_stretch, together_stretch and "
                         "together_speed", short_repr(c))
    clock = c.get("clock", "thread")
    if clock not in CLOCKS:
        raise InputError(path, f"{where}.clock", "one of " + ", ".join(CLOCKS), short_repr(clock))
    for key in ("ranks", "rows"):
        _positive_int(path, f"{where}.{key}", c.get(key))
    ratios = {}
    for key in ("alone_stretch", "together_stretch", "together_speed"):
        v = c.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise InputError(path, f"{where}.{key}", "a positive number (a ratio; 1 = no effect)", short_repr(v))
        ratios[key] = float(v)
    calls = c.get("call_ms")
    if calls is not None:
        if not isinstance(calls, dict) or not set(calls) <= set(CALL_KINDS):
            raise InputError(path, f"{where}.call_ms", "an object with ms per call kind (" + ", ".join(CALL_KINDS)
                             + "), e.g. {\"allreduce\": 0.8, \"p2p\": 0.6}; re-run `tag profile ops` to measure it",
                             short_repr(calls))
        calls = tuple((k, _number(path, f"{where}.call_ms.{k}", calls[k])) for k in CALL_KINDS if k in calls)
    cores = c.get("cores")
    if cores is not None:
        _positive_int(path, f"{where}.cores", cores,
                      "a positive integer (the cores the probe's processes could use) or no key")
    alone = c.get("alone_step_ms")
    if alone is not None:
        alone = _number(path, f"{where}.alone_step_ms", alone)
    speed = rank_speed(alone, step_block_ms(step, c["rows"]), clock)
    return ContentionTerms(c["ranks"], c["rows"], _number(path, f"{where}.handoff_ms", c.get("handoff_ms")),
                           clock=clock, call_ms=calls or None, cores=cores, rank_speed=speed,
                           quota_scale=quota_scale(cpu_quota_cores), **ratios)


def _positive_int(path: str, where: str, v, expected: str = "a positive integer") -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise InputError(path, where, expected, short_repr(v))
    return v


def _number(path: str, where: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise InputError(path, where, "a non-negative number", short_repr(v))
    return float(v)


def _step_from_json(path: str, where: str, st) -> StepProfile:
    if not isinstance(st, dict):
        raise InputError(path, where, "an object with optimizer, rows, groups, update_ms and other_ms", short_repr(st))
    opt = st.get("optimizer")
    if not isinstance(opt, str) or not opt:
        raise InputError(path, f"{where}.optimizer", "an optimizer name", short_repr(opt))
    rows = _check_series(path, f"{where}.rows", st.get("rows"), None, "rows")
    n = len(rows)
    groups = []
    for i, g in enumerate(_list(path, f"{where}.groups", st.get("groups", []))):
        w = f"{where}.groups[{i}]"
        if not isinstance(g, dict):
            raise InputError(path, w, "an object with ops, fwd_ms and bwd_ms", short_repr(g))
        names = g.get("ops")
        if not isinstance(names, list) or not names or not all(isinstance(x, str) for x in names):
            raise InputError(path, f"{w}.ops", "a non-empty list of op names", short_repr(names))
        fwd = [float(v) for v in _check_series(path, f"{w}.fwd_ms", g.get("fwd_ms"), n, "ms")]
        bwd = [float(v) for v in _check_series(path, f"{w}.bwd_ms", g.get("bwd_ms"), n, "ms")]
        groups.append(StepGroup(list(names), fwd, bwd, _number(path, f"{w}.update_ms", g.get("update_ms", 0.0)),
                                int(_number(path, f"{w}.param_bytes", g.get("param_bytes", 0)))))
    upd = [float(v) for v in _check_series(path, f"{where}.update_ms", st.get("update_ms"), n, "ms")]
    other = [float(v) for v in _check_series(path, f"{where}.other_ms", st.get("other_ms"), n, "ms")]
    sizes = st.get("copy_bytes", [])
    if sizes:
        sizes = _check_series(path, f"{where}.copy_bytes", sizes, None, "rows")
        cin = [float(v) for v in _check_series(path, f"{where}.copy_in_ms", st.get("copy_in_ms"), len(sizes), "ms")]
        cout = [float(v) for v in _check_series(path, f"{where}.copy_out_ms", st.get("copy_out_ms"), len(sizes), "ms")]
        fill = st.get("fill_ms")
        fill = [] if fill is None else [float(v) for v in _check_series(path, f"{where}.fill_ms", fill, len(sizes), "ms")]
    else:
        sizes, cin, cout, fill = [], [], [], []
    return StepProfile(opt, rows, groups, upd, other, list(sizes), cin, cout, fill)


def _step_to_json(st: StepProfile) -> dict:
    return {"optimizer": st.optimizer, "rows": list(st.rows),
            "groups": [{"ops": list(g.ops), "fwd_ms": list(g.fwd_ms), "bwd_ms": list(g.bwd_ms),
                        "update_ms": g.update_ms, "param_bytes": g.param_bytes} for g in st.groups],
            "update_ms": list(st.update_ms), "other_ms": list(st.other_ms), "copy_bytes": list(st.copy_bytes),
            "copy_in_ms": list(st.copy_in_ms), "copy_out_ms": list(st.copy_out_ms),
            **({"fill_ms": list(st.fill_ms)} if st.fill_ms else {})}


def _list(path: str, where: str, value) -> list:
    if not isinstance(value, list):
        raise InputError(path, where, "a JSON array", short_repr(value))
    return value


def _group_from_json(path: str, where: str, g) -> GroupProfile:
    if not isinstance(g, dict):
        raise InputError(path, where, "an object with ops, rows, fwd_ms and bwd_ms", short_repr(g))
    names = g.get("ops")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise InputError(path, f"{where}.ops", "a non-empty list of op names", short_repr(names))
    rows = _check_series(path, f"{where}.rows", g.get("rows"), None, "rows")
    series = {}
    for key in ("fwd_ms", "bwd_ms", "ops_fwd_ms", "ops_bwd_ms"):
        value = g.get(key)
        if value is None and key.startswith("ops_"):
            series[key] = None
            continue
        series[key] = [float(v) for v in _check_series(path, f"{where}.{key}", value, len(rows), "ms")]
    return GroupProfile(list(names), rows, series["fwd_ms"], series["bwd_ms"], series["ops_fwd_ms"], series["ops_bwd_ms"])


def to_json(db: ProfileDB) -> dict:
    """The JSON object of a `ProfileDB` (the format above)."""
    ops = {}
    for sig, p in sorted(db.ops.items()):
        e = {"rows": list(p.rows), "fwd_ms": list(p.fwd_ms)}
        if p.bwd_ms is not None:
            e["bwd_ms"] = list(p.bwd_ms)
        ops[sig] = e
    out = {"version": VERSION, "device_type": db.device_type, "threads": db.threads, "machine": db.machine, "ops": ops}
    if db.cpu_quota_cores is not None:
        out["cpu_quota_cores"] = db.cpu_quota_cores
    if db.dispatch_ms is not None:
        out["dispatch_ms"] = db.dispatch_ms
    if db.settings:
        out["settings"] = db.settings
    if db.groups:
        out["groups"] = []
        for g in db.groups:
            e = {"ops": list(g.ops), "rows": list(g.rows), "fwd_ms": list(g.fwd_ms), "bwd_ms": list(g.bwd_ms)}
            if g.ops_fwd_ms is not None:
                e["ops_fwd_ms"] = list(g.ops_fwd_ms)
            if g.ops_bwd_ms is not None:
                e["ops_bwd_ms"] = list(g.ops_bwd_ms)
            out["groups"].append(e)
    if db.step is not None:
        out["step"] = _step_to_json(db.step)
    if db.contention is not None:
        t = db.contention
        out["contention"] = {**db.contention_raw, "clock": t.clock, "ranks": t.ranks, "rows": t.rows,
                             "handoff_ms": t.handoff_ms, "alone_stretch": t.alone_stretch,
                             "together_stretch": t.together_stretch, "together_speed": t.together_speed}
        if t.call_ms:
            out["contention"]["call_ms"] = dict(t.call_ms)
        if t.cores is not None:
            out["contention"]["cores"] = t.cores
    return out


def _read(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise InputError(path, "$", "a readable profile JSON file", e.strerror) from None
    except json.JSONDecodeError as e:
        raise InputError(path, f"line {e.lineno}", "valid JSON", e.msg) from None


def load(path: str) -> ProfileDB:
    """Read and validate a profile file (InputError naming the file and JSON path on bad input; a profile set names
    `load_all`)."""
    obj = _read(path)
    if isinstance(obj, dict) and "profiles" in obj:
        raise InputError(path, "profiles", "one device type's profile here (a profile set: one per device type, "
                         "read by tag plan, simulate and deploy)", f"{len(obj['profiles'])} profiles")
    return from_json(obj, path)


def load_all(path: str) -> list[ProfileDB]:
    """The profiles of a file: a profile (one), or a **profile set** ``{"version": 1, "profiles": [profile, ...]}``,
    one profile object per device type (a heterogeneous cluster: each type measured on its own machine, written by
    `tag.profile.profile_set.write_profile_set`). InputError naming ``profiles[i]...`` on bad input or a repeated
    device type."""
    obj = _read(path)
    if not (isinstance(obj, dict) and "profiles" in obj):
        return [from_json(obj, path)]
    if obj.get("version") != VERSION:
        raise InputError(path, "version", f"{VERSION}", short_repr(obj.get("version")))
    members = obj["profiles"]
    if not isinstance(members, list) or not members:
        raise InputError(path, "profiles", "a non-empty list of profile objects", short_repr(members))
    out: list[ProfileDB] = []
    for i, m in enumerate(members):
        try:
            db = from_json(m, path)
        except InputError as e:
            raise InputError(path, f"profiles[{i}].{e.where}".replace(".$", ""), e.expected, e.found) from None
        if any(o.device_type == db.device_type for o in out):
            raise InputError(path, f"profiles[{i}].device_type", "one profile per device type",
                             f"{db.device_type!r} again")
        out.append(db)
    return out


def save(db: ProfileDB, path: str) -> None:
    """Write a profile file (sorted keys, 2-space indent)."""
    write_text_atomic(path, json.dumps(to_json(db), indent=2, sort_keys=True) + "\n")
