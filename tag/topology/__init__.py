"""Clusters: topology.json v1 parsing and validation, the device catalog, routes, random clusters, imports.

Public API: `load_topology(path)`, `parse_topology(obj, source)`, `random_topology(seed, ...)`,
`import_metis(path)`, `summary(cluster)`, `CATALOG` (in `tag.topology.catalog`) and the data classes of
`tag.topology.cluster`. The network model and latency accounting are documented in `routing.py`.
"""

from tag.topology.catalog import CATALOG
from tag.topology.cluster import Cluster, Device, DeviceType, Link, Machine
from tag.topology.loader import import_metis, load_topology, parse_topology, read_json
from tag.topology.random_topo import random_topology
from tag.topology.summary import summary

__all__ = ["CATALOG", "Cluster", "Device", "DeviceType", "Link", "Machine", "load_topology", "parse_topology",
           "read_json", "import_metis", "random_topology", "summary"]
