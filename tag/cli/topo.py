"""`tag topo random --seed S [-o T.json]`, `tag topo import FILE [-o T.json]`: make topology files;
`tag topo catalog`: list the built-in device types."""

from __future__ import annotations

import json
import sys

from tag.cli.util import add_output_flags, add_verb
from tag.cli._topo_catalog import add_parser as add_catalog_parser, run as run_catalog


def add_parser(sub):
    p = add_verb(sub, "topo", "make topology files (random clusters, Metis imports); list the device catalog",
                 "tag topo random --seed 3 -o random3.json\n  tag topo import metis_cluster.json -o cluster.json\n"
                 "  tag topo catalog")
    verbs = p.add_subparsers(dest="topo_verb", metavar="ACTION")
    r = add_verb(verbs, "random", "a random heterogeneous cluster (a function of the seed)",
                 "tag topo random --seed 3 -o random3.json\n  tag topo random --seed 1 --machines 64 --max-devices 8 --json",
                 description="Draw a heterogeneous cluster from the device catalog: 1-6 machines (or --machines), "
                             "each with 1..--max-devices GPUs (of one type, now and then two), joined by a drawn network layout "
                             "(flat switch, direct links or racks). The same --seed and flags give the same file. "
                             "Prints the topology.json, or writes it to -o.")
    r.add_argument("--seed", type=int, required=True, metavar="S", help="random seed")
    r.add_argument("--machines", type=int, default=None, metavar="N", help="exact number of machines (default 1-6)")
    r.add_argument("--max-devices", type=int, default=8, metavar="N", help="devices per machine drawn from 1..N (default 8)")
    r.add_argument("--layout", choices=["flat", "direct", "racks"], default=None, help="network layout (default: drawn)")
    r.add_argument("-o", "--output", default=None, metavar="T.json", help="write the topology here (default: stdout)")
    add_output_flags(r)
    i = add_verb(verbs, "import", "convert a Metis-style cluster file to topology.json v1",
                 "tag topo import metis_cluster.json -o cluster.json\n  tag topo import metis_cluster.json --json",
                 description="Convert a Metis-style cluster file (per-node instance type, intra- and inter-node "
                             "bandwidth, memory) to topology.json version 1; the result is parsed back before it "
                             "is printed or written to -o, so a file tag cannot read is never written.")
    i.add_argument("file", help="the cluster file to convert")
    i.add_argument("-o", "--output", default=None, metavar="T.json", help="write the topology here (default: stdout)")
    add_output_flags(i)
    add_catalog_parser(verbs)
    return p


def run(args) -> int:
    if args.topo_verb == "catalog":
        return run_catalog(args)
    from tag.cli.util import check_outputs
    from tag.errors import InputError
    from tag.fileio import write_text_atomic
    from tag.topology import import_metis, parse_topology, random_topology

    if args.topo_verb in ("random", "import"):
        check_outputs(args, {"output": "-o/--output"}, [getattr(args, "file", None)])

    if args.topo_verb == "random":
        if args.machines is not None and args.machines < 1:
            raise InputError("--machines", "--machines", "a positive integer", str(args.machines))
        if args.max_devices < 1:
            raise InputError("--max-devices", "--max-devices", "a positive integer", str(args.max_devices))
        lo, hi = (args.machines, args.machines) if args.machines else (1, 6)
        if args.layout == "racks" and hi < 3:
            raise InputError("--layout", "--layout", "at least 3 machines for racks", f"{hi} machines")
        if args.layout == "racks":
            lo = max(lo, 3)
        topo = random_topology(args.seed, min_machines=lo, max_machines=hi,
                               max_devices_per_machine=args.max_devices, layout=args.layout)
    elif args.topo_verb == "import":
        topo = import_metis(args.file)
    else:
        raise InputError("tag topo", "ACTION", "one of: random, import, catalog", "nothing")
    cluster = parse_topology(topo, args.output or f"{topo['name']}.json")  # fails loudly if we made a bad file
    text = json.dumps(topo, indent=2) + "\n"
    if args.output:
        write_text_atomic(args.output, text)
        human = f"wrote {args.output}: {len(cluster.machines)} machines, {cluster.n_devices} devices"
        if getattr(args, "json", False):
            sys.stdout.write(json.dumps(topo) + "\n")
        else:
            sys.stdout.write(human + "\n")
    else:
        sys.stdout.write(json.dumps(topo) + "\n" if getattr(args, "json", False) else text)
    return 0
