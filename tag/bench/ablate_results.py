"""The ablation's results file (`tag bench --ablate --results F.jsonl`): one JSON object per finished case, so a long
grid survives being stopped and a re-run skips what is done.

Each line is `case_record(case)`: the case's names, what it was asked to run with (`AblationSettings`, the key a
re-run skips on together with model and topology), what it planned (batch, precision), per part the iteration ms,
simulations, seconds, whether the safety cap bound, the start the search began from and the structure tree's best
path, the compute bound and the latency floor (absent in files written before it: read as nan), an error if it
failed, and the commit of the code that ran it. A line may hold some parts only (`tag bench --ablate --parts`): lines of
one case by the same commit read as one case (`merge_parts`). Non-finite times are written as JSON strings ("inf": out of memory,
"nan": not measured), so the file is strict JSON. A line is appended with one `write` on a file opened for appending and synced before the
next case starts: an interrupted run leaves whole lines only (a torn last line is reported as corrupt).

    >>> from tag.bench.ablate import AblationCase
    >>> c = AblationCase("mlp", "cpu4", ms={"start": 2.0, "full": math.inf}, bound_ms=1.0)
    >>> read_record(json.loads(json.dumps(case_record(c))), "F", 1).ms == c.ms
    True
"""

from __future__ import annotations

import json
import math
import os
import subprocess

from tag.bench.ablate import PARTS, AblationCase, AblationSettings
from tag.errors import InputError, short_repr

FORMAT = "tag-ablate-case-v1"
_EXPECTED = f"one JSON object per line as `tag bench --ablate --results` writes it (\"format\": \"{FORMAT}\")"


def case_key(model: str, topology: str, settings: AblationSettings) -> tuple:
    """What identifies a case in the results file: a re-run with the same key skips it."""
    return (model, topology, settings)


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else ("inf" if v == math.inf else "nan")


def _float(v, path: str, line: int, where: str) -> float:
    if isinstance(v, str) and v in ("inf", "nan"):
        return float(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    raise InputError(path, f"line {line}: {where}", "a number, \"inf\" or \"nan\"", short_repr(v))


def case_record(case: AblationCase) -> dict:
    """The JSON object of one finished case (module docstring)."""
    s = case.settings
    return {"format": FORMAT, "model": case.model, "topology": case.topology, "random_seed": case.random_seed,
            "settings": {"batch_size": s.batch_size, "optimizer": s.optimizer, "playouts": s.playouts,
                         "simulations": s.simulations, "seed": s.seed},
            "batch_size": case.batch_size, "precision": case.precision,
            "ms": {p: _num(v) for p, v in case.ms.items()}, "bound_ms": _num(case.bound_ms),
            "floor_ms": _num(case.floor_ms),
            "simulations": case.simulations, "seconds": case.seconds, "capped": case.capped,
            "error": case.error, "commit": case.commit, "starts": case.starts, "paths": case.paths}


def read_record(obj, path: str, line: int) -> AblationCase:
    """The case of one parsed line; InputError naming `path` and `line` when it is not a `case_record`."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise InputError(path, f"line {line}", _EXPECTED, short_repr(obj))
    try:
        s = obj["settings"]
        settings = AblationSettings(s["batch_size"], s["optimizer"], s["playouts"], s["simulations"], s["seed"])
        case = AblationCase(str(obj["model"]), str(obj["topology"]), error=obj["error"],
                            precision=obj["precision"], settings=settings, batch_size=int(obj["batch_size"]),
                            random_seed=obj["random_seed"], commit=obj["commit"])
        case.ms = {p: _float(v, path, line, f"ms.{p}") for p, v in obj["ms"].items() if p in PARTS}
        case.bound_ms = _float(obj["bound_ms"], path, line, "bound_ms")
        case.floor_ms = _float(obj.get("floor_ms", "nan"), path, line, "floor_ms")
        case.simulations = {p: int(v) for p, v in obj["simulations"].items()}
        case.seconds = {p: float(v) for p, v in obj["seconds"].items()}
        case.capped = {p: bool(v) for p, v in obj["capped"].items()}
        case.starts = {p: str(v) for p, v in obj["starts"].items()}
        case.paths = {p: str(v) for p, v in obj["paths"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InputError(path, f"line {line}", _EXPECTED, f"{type(e).__name__} {short_repr(str(e))}") from None
    return case


def read_results(path: str) -> list[AblationCase]:
    """Every case in the results file, in file order; [] when the file does not exist. A later line with the same
    `case_key` replaces an earlier one, except that lines of some parts each (`tag bench --ablate --parts`) planned
    by the same commit make one case (`merge_parts`). A line that is not a case record is an InputError naming the
    line."""
    if not os.path.exists(path):
        return []
    cases: dict[tuple, AblationCase] = {}
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise InputError(path, f"line {n}", _EXPECTED, f"invalid JSON ({e.msg} at column {e.colno})") from None
            case = read_record(obj, path, n)
            key = case_key(case.model, case.topology, case.settings)
            case = merge_parts(cases.pop(key, None), case)
            cases[key] = case
    return list(cases.values())


def merge_parts(earlier: AblationCase | None, later: AblationCase) -> AblationCase:
    """`later`, with the parts it lacks taken from `earlier` when both are finished lines of the same case planned
    by the same code (`same_code`; so one case's columns can be planned by several runs, `tag bench --ablate --parts`);
    otherwise `later` alone (columns of different code are not one row). Per part, `later`'s figures win; the
    case's own figures (batch, precision, bound, floor) are `later`'s: every part plans the same inputs."""
    if earlier is None or earlier.error or later.error or not same_code(earlier.commit, later.commit):
        return later
    own = set(later.ms)
    for name in ("ms", "simulations", "seconds", "capped", "starts", "paths"):
        merged = {p: v for p, v in getattr(earlier, name).items() if p not in own}
        merged.update(getattr(later, name))
        setattr(later, name, {p: merged[p] for p in PARTS if p in merged})
    return later


def parts_to_plan(held: AblationCase | None, parts: tuple[str, ...], commit: str | None) -> tuple[str, ...]:
    """Which of `parts` a run by `commit` plans for a case the results file holds as `held` (None: not at all):
    none when it holds them all (or the case failed: a re-run does not plan it again); else the missing ones when
    `held` was planned by the same code (`same_code`; `merge_parts` joins them), else all of `parts`."""
    if held is None:
        return parts
    if held.error or set(parts) <= set(held.ms):
        return ()
    if same_code(held.commit, commit):
        return tuple(p for p in parts if p not in held.ms)
    return parts


def same_code(a: str | None, b: str | None) -> bool:
    """Whether two lines' `commit`s name the same code: one commit, without uncommitted changes ("+dirty": two runs
    from a changed checkout may have run different code)."""
    return a is not None and a == b and not a.endswith("+dirty")


def append_result(path: str, case: AblationCase) -> None:
    """Append the case's line to `path` (created if absent) with one write, then fsync (module docstring)."""
    data = (json.dumps(case_record(case), sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(f"{path}: short write (disk full?); remove its last line before a re-run")
        os.fsync(fd)
    finally:
        os.close(fd)


def code_commit() -> str | None:
    """The commit of the tag checkout this code runs from (with "+dirty" when it has uncommitted changes), or
    None outside a git checkout."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=30)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "tag"],
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
