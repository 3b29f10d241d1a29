"""`tag bench --published`: predictions of the catalog cost model against published GPU measurements.

The tables come from `benchmarks/published.py` in the source checkout (single-GPU throughput per published
row, MAPE per model family and precision, 8-GPU DGX-1 scaling efficiency). `--out F.md` also writes them.
"""

from __future__ import annotations


def run_published(args) -> int:
    """Run benchmarks/published.py with the `tag bench` arguments (--json, --out); returns the exit code."""
    from tag.cli.bench import _benchmarks_module

    args.json = getattr(args, "json", False)
    if getattr(args, "profile", None):
        from tag.errors import InputError

        raise InputError(args.profile, "--profile", "no profile with --published (it checks the catalog model)",
                         "a profile file")
    return int(_benchmarks_module("published").run(args) or 0)
