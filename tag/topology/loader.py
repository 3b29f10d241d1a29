"""Reading topology files: JSON decoding with located errors, Metis detection and import, parse to a `Cluster`."""

from __future__ import annotations

import json

from tag.errors import InputError
from tag.topology.cluster import Cluster
from tag.topology.metis import looks_like_metis, metis_to_topology
from tag.topology.routing import build_cluster
from tag.topology.schema import validate_topology


def read_json(path: str):
    """The decoded JSON value of the file at `path`; InputError (file, where, expected, found) otherwise."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(str(path), "$", "a readable file", e.strerror or type(e).__name__) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(str(path), f"$ (byte {e.start})", "UTF-8 JSON text", "undecodable bytes") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(str(path), f"$ (line {e.lineno}, column {e.colno})", "valid JSON", e.msg) from None
    except RecursionError:
        raise InputError(str(path), "$", "valid JSON of reasonable depth", "nesting too deep") from None


def parse_topology(obj, source: str) -> Cluster:
    """Validate a topology.json v1 object (or a Metis cluster object) and build its `Cluster`.

    `source` names the file in error messages and becomes `Cluster.source`; the name defaults to its stem.
    """
    if looks_like_metis(obj):
        obj = metis_to_topology(obj, source)
    return build_cluster(validate_topology(obj, source))


def load_topology(path: str) -> Cluster:
    """Read, validate and route the topology file at `path` (topology.json v1 or a Metis cluster file)."""
    return parse_topology(read_json(path), str(path))


def import_metis(path: str) -> dict:
    """Read a Metis-style cluster file and return the equivalent topology.json v1 object (`metis_to_topology`)."""
    return metis_to_topology(read_json(path), str(path))
