"""Profile sets: one profile per device type in one file, for a heterogeneous cluster.

Run `tag profile ops` on a machine of each device type (``--device-type`` naming the type its topology gives that
machine's devices), then join the files; `tag plan --profile SET.json` records the set's path and sha256 in the plan
like a single profile's, and `tag simulate` and `tag deploy` rebuild the same cost model from it (each device takes
its type's figures, `tag.cost.profiled.MultiProfileCostModel`). Format: `tag.cost.profile_db.load_all`.

>>> import json, os, tempfile
>>> d = tempfile.mkdtemp()
>>> for t in ("cpu-a", "cpu-b"):
...     _ = open(os.path.join(d, t + ".json"), "w").write(json.dumps({"version": 1, "device_type": t, "ops": {}}))
>>> write_profile_set([os.path.join(d, "cpu-a.json"), os.path.join(d, "cpu-b.json")], os.path.join(d, "set.json"))
['cpu-a', 'cpu-b']
"""

from __future__ import annotations

import json

from tag.cost.profile_db import VERSION, load_all, to_json
from tag.errors import InputError
from tag.fileio import write_text_atomic


def write_profile_set(paths: list[str], out: str) -> list[str]:
    """Write the profiles of `paths` (each a profile or a set) as one profile set at `out`; returns the device
    types in order. InputError (naming the file) when two profiles hold the same device type."""
    dbs, seen = [], {}
    for path in paths:
        for db in load_all(path):
            if db.device_type in seen:
                raise InputError(path, "device_type", "one profile per device type",
                                 f"{db.device_type!r}, also in {seen[db.device_type]}")
            seen[db.device_type] = path
            dbs.append(db)
    obj = {"version": VERSION, "profiles": [to_json(db) for db in dbs]}
    write_text_atomic(out, json.dumps(obj, indent=2, sort_keys=True) + "\n")
    return [db.device_type for db in dbs]
