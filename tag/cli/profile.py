"""`tag profile ops MODEL -o PROFILE.json` and `tag profile links --nproc N -o TOPOLOGY.json`: measure real hardware."""

from __future__ import annotations

from tag.cli.util import add_model_flags, add_output_flags, add_verb
from tag.errors import InputError


def add_parser(sub):
    p = add_verb(sub, "profile", "measure op times (ops) or links (links) on this hardware",
                 "tag profile ops datasets/models/resnet50.onnx -o profile.json\n"
                 "  tag profile links --nproc 2 -o measured.json --compare datasets/topologies/heterog8.json")
    verbs = p.add_subparsers(dest="what", metavar="WHAT", required=True)

    o = add_verb(verbs, "ops", "forward and backward time of every op and group of a model on a local device",
                 "tag profile ops datasets/models/mlp.onnx -o profile.json --rows 1,2,4 --repeats 3\n"
                 "  tag plan datasets/models/mlp.onnx datasets/topologies/cpu4.json --profile profile.json",
                 description="Time the forward and backward pass of every op (and of every op group, as one run) "
                             "of MODEL on one local device at each --rows batch size; the median of --repeats "
                             "timed calls is kept. The profile.json it writes replaces the roofline estimate in "
                             "`tag plan --profile` and `tag simulate --profile` for devices of --device-type.")
    o.add_argument("model", help="the model .onnx")
    o.add_argument("-o", "--output", required=True, metavar="PROFILE.json", help="profile database to write")
    o.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    o.add_argument("--device-type", default=None, metavar="NAME",
                   help="device type the figures hold for, as named in the catalog (default cpu; required for a GPU)")
    o.add_argument("--rows", default=None, metavar="R,R,...",
                   help="row counts to measure (default: 1, 2, 4, ... up to the batch, and the batch)")
    o.add_argument("--clock", default=None, choices=["thread", "wall"],
                   help="time on the thread's CPU clock or the wall clock (default: thread for a one-thread CPU "
                        "profile, whose contention block then holds the wall-clock stretch; else wall)")
    o.add_argument("--ranks", type=int, default=2, metavar="N",
                   help="ranks of the contention probe on a CPU: handoff latency, compute stretch and the model's "
                        "step with N ranks at once (default 2; 0 = no probe)")
    o.add_argument("--groups", type=int, default=None, metavar="K", help="op groups to time as one run (default: automatic)")
    o.add_argument("--no-groups", action="store_true", help="do not time groups, only ops")
    _common(o)
    add_model_flags(o)
    add_output_flags(o)

    ln = add_verb(verbs, "links", "p2p and all-reduce sweeps among ranks into a measured topology.json",
                  "tag profile links --nproc 2 -o measured.json --sizes 4,1K,64K --repeats 3\n"
                  "  tag profile links --nproc 2 -o measured.json --compare datasets/topologies/cpu4.json",
                  description="Start --nproc local ranks (or join the ranks torchrun started), time point-to-point "
                              "messages and all-reduces at each --sizes message size, fit latency and bandwidth, "
                              "and write a topology.json whose devices and links carry the measured figures. "
                              "--compare reports where an existing topology disagrees with the measurement.")
    ln.add_argument("-o", "--output", required=True, metavar="TOPOLOGY.json", help="topology file to write")
    ln.add_argument("--nproc", type=int, default=2, metavar="N", help="local ranks, one per device (default 2); "
                    "under torchrun the ranks torchrun started")
    ln.add_argument("--compare", default=None, metavar="T.json", help="report where this topology disagrees with the measurement")
    ln.add_argument("--sizes", default="4,1K,16K,256K,1M,4M,16M", metavar="S,S,...",
                    help="message sizes in bytes (K, M suffixes; default 4,1K,16K,256K,1M,4M,16M)")
    ln.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu (gloo) or cuda (NCCL)")
    ln.add_argument("--device-type", default=None, metavar="NAME", help="device type name (default cpu; required for cuda)")
    ln.add_argument("--name", default=None, help="topology name (default: the output file's stem)")
    ln.add_argument("--timeout", type=float, default=600.0, metavar="S", help="give up after S seconds (default 600)")
    _common(ln)
    add_output_flags(ln)
    return p


def _common(p) -> None:
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before each figure (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per figure; the median is kept (default 5)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of a rank, as deploy runs it (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data and fresh weights")
    p.add_argument("--quick", action="store_true", help="small machine micro-benchmarks (smoke runs)")


def _positive(flag: str, value: int) -> int:
    if value is None or value < 1:
        raise InputError(flag, "N", "a positive integer", str(value))
    return value


def parse_sizes(text: str, flag: str = "--sizes") -> list[int]:
    """Comma list of byte counts with optional K (2^10) or M (2^20) suffix -> increasing ints, multiples of 4."""
    out = []
    for part in text.split(","):
        p = part.strip().upper()
        mult = {"K": 2 ** 10, "M": 2 ** 20}.get(p[-1:], 1)
        try:
            n = int(p[:-1] if mult > 1 else p) * mult
        except ValueError:
            raise InputError(flag, part, "a byte count like 4, 16K or 1M", repr(part)) from None
        if n < 4 or n % 4:
            raise InputError(flag, part, "a positive multiple of 4 bytes", str(n))
        out.append(n)
    if len(set(out)) < 2:
        raise InputError(flag, text, "at least two different sizes (for the alpha-beta fit)", text)
    return sorted(set(out))


def parse_rows(text: str) -> list[int]:
    """Comma list of positive row counts -> sorted distinct ints."""
    try:
        rows = sorted({int(r) for r in text.split(",")})
    except ValueError:
        raise InputError("--rows", text, "comma-separated positive integers like 1,2,4,8", repr(text)) from None
    if not rows or rows[0] < 1:
        raise InputError("--rows", text, "positive row counts", repr(text))
    return rows


def default_rows(batch: int) -> list[int]:
    """Row counts `tag profile ops` measures without --rows: powers of two below the batch, and the batch (a plan
    runs at most the batch on one device; interpolating there beats extrapolating from a few rows).

    >>> default_rows(64), default_rows(48), default_rows(1)
    ([1, 2, 4, 8, 16, 32, 64], [1, 2, 4, 8, 16, 32, 48], [1])
    """
    out, r = [], 1
    while r < batch:
        out.append(r)
        r *= 2
    return out + [max(int(batch), 1)]


def _device_type(args, is_gpu: bool) -> str:
    if args.device_type:
        return args.device_type
    if is_gpu:
        raise InputError("--device-type", "NAME", "a device type name for a GPU (e.g. A100-40GB)", "nothing")
    return "cpu"


def run(args) -> int:
    from tag.cli.util import check_outputs

    check_outputs(args, {"output": "-o/--output"}, [getattr(args, "model", None), getattr(args, "compare", None),
                                                     getattr(args, "profile", None)])
    for flag in ("warmup", "repeats", "threads"):
        if flag != "warmup":
            _positive(f"--{flag}", getattr(args, flag))
        elif args.warmup < 0:
            raise InputError("--warmup", "N", "a non-negative integer", str(args.warmup))
    if args.what == "ops":
        if args.ranks is None or args.ranks < 0 or args.ranks == 1:
            raise InputError("--ranks", "N", "0 (no contention probe) or at least 2 ranks", str(args.ranks))
        return _run_ops(args, _device_type(args, args.device.startswith("cuda")),
                        None if args.rows is None else parse_rows(args.rows))
    _positive("--nproc", args.nproc)
    return _run_links(args, _device_type(args, args.device == "cuda"), parse_sizes(args.sizes))


def _check_device(device: str) -> str:
    import torch

    if device == "cpu":
        return device
    if device.startswith("cuda"):
        index = device.partition(":")[2] or "0"
        if not index.isdigit():
            raise InputError("--device", device, "cpu or cuda:N", repr(device))
        if not torch.cuda.is_available() or int(index) >= torch.cuda.device_count():
            raise InputError("--device", device, "a CUDA device present on this machine",
                             f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} CUDA devices")
        return f"cuda:{index}"
    raise InputError("--device", device, "cpu or cuda:N", repr(device))


def _run_ops(args, device_type: str, rows: list[int]) -> int:
    from tag.cli.util import emit, parse_input_shapes, progress
    from tag.cost.profile_db import save
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.profile.ops import OpsSettings, profile_ops, work_items
    from tag.profile.summary import ops_summary, ops_table

    device = _check_device(args.device)
    graph = load_model(args.model, data_inputs=list(args.data_input or []),
                       input_shapes=parse_input_shapes(args.input_shape or []), batch_size=args.batch_size, n_devices=1)
    rows = rows or default_rows(graph.batch_size)
    gg = None if args.no_groups else coarsen(graph, k=args.groups, n_devices=1)
    cpu = device == "cpu"
    clock = args.clock or ("thread" if cpu and args.threads == 1 else "wall")
    if clock == "thread" and not cpu:
        raise InputError("--clock", "thread", "wall on a GPU (its kernels run off the thread)", "thread")
    settings = OpsSettings(rows=rows, warmup=args.warmup, repeats=args.repeats, threads=args.threads, seed=args.seed,
                           device=device, device_type=device_type, groups=not args.no_groups, quick_machine=args.quick,
                           clock=clock, contention_ranks=args.ranks if cpu else 0)
    bar = progress(total=work_items(graph, gg, settings), desc="profile ops", unit="op")
    try:
        db = profile_ops(args.model, graph, gg, settings, progress=bar.update)
    finally:
        bar.close()
    save(db, args.output)
    if db.contention is not None:
        import sys

        from tag.profile.contention import busy_warning

        warning = busy_warning(db.contention)
        if warning:
            sys.stderr.write(f"tag profile: warning: {warning}\n")
    summary = ops_summary(db, graph, args.output)
    emit(args, summary, ops_table(db, graph, summary))
    return 0


def _run_links(args, device_type: str, sizes: list[int]) -> int:
    import os

    from tag.cli.util import emit
    from tag.profile.links import LinksFailed, compare, launch_local, measured_topology, under_torchrun
    from tag.profile.links_sweep import LinkSettings
    from tag.profile.summary import links_summary, links_table

    if args.compare:
        from tag.topology import load_topology
        load_topology(args.compare)  # bad input fails before minutes of measuring
    settings = LinkSettings(sizes_bytes=sizes, warmup=args.warmup, repeats=args.repeats, device=args.device,
                            device_type=device_type, threads=args.threads, quick_machine=args.quick)
    if under_torchrun():
        from tag.profile.links_worker import join_and_run
        result = join_and_run(settings, args.timeout)
        if result is None:
            return 0  # only rank 0 writes and reports
    else:
        if args.device == "cuda":
            _check_device(f"cuda:{args.nproc - 1}")
        from tag.cli.util import progress
        bar = progress(total=None, desc=f"profile links ({args.nproc} ranks)", unit="s")
        try:
            result = launch_local(settings, args.nproc, args.timeout, tick=bar.update)
        except LinksFailed as e:
            raise RuntimeError(str(e)) from None
        finally:
            bar.close()
    name = args.name or os.path.splitext(os.path.basename(args.output))[0] or "measured"
    topo = measured_topology(result, name)
    import json

    from tag.fileio import write_text_atomic
    write_text_atomic(args.output, json.dumps(topo, indent=2) + "\n")
    rows = compare(topo, args.compare) if args.compare else None
    summary = links_summary(topo, args.output, rows)
    emit(args, summary, links_table(summary))
    return 0
