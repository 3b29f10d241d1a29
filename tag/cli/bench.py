"""`tag bench [--quick] [--published] [--profile F]`: the benchmark suite table (code in benchmarks/)."""

from __future__ import annotations

from tag.cli.util import add_output_flags, add_verb


def add_parser(sub):
    p = add_verb(sub, "bench", "run the benchmark suite: every datasets model x topology, baselines, plan, bound",
                 "tag bench --quick\n  tag bench --published\n  tag bench --models resnet50 --topologies tag16 --out results.md")
    p.add_argument("--quick", action="store_true", help="a few models and topologies with a small search (< 3 min)")
    p.add_argument("--published", action="store_true",
                   help="hold single-GPU and 8-GPU predictions against published measurements instead")
    p.add_argument("--profile", metavar="F", default=None, help="profile.json with measured op times")
    p.add_argument("--playouts", type=int, default=None, metavar="N", help="search playouts per case")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS", help="search budget per case")
    p.add_argument("--models", nargs="*", default=None, metavar="NAME", help="datasets model names")
    p.add_argument("--topologies", nargs="*", default=None, metavar="NAME", help="datasets topology names")
    p.add_argument("--out", metavar="FILE.md", default=None, help="also write the markdown table here")
    add_output_flags(p)
    return p


def _benchmarks_module(name: str):
    """Import benchmarks/<name>.py from the source checkout tag runs from."""
    import importlib.util
    import os

    from tag.errors import InputError

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "benchmarks", f"{name}.py")
    if not os.path.exists(path):
        raise InputError(path, "benchmarks", "a source checkout of tag (tag bench runs benchmarks/ from it)",
                         "no such file")
    spec = importlib.util.spec_from_file_location(f"tag_benchmarks_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(args) -> int:
    if args.published:
        from tag.cli._bench_published import run_published

        return run_published(args)
    return int(_benchmarks_module("suite").run(args) or 0)
