"""The `tag` console script: parses arguments, dispatches to a verb module in `tag/cli/`, maps errors.

Bad input (`InputError`) -> exit 2 and exactly one line on stderr. Any other exception -> exit 1 with
a one-line summary, the traceback only under --debug.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings

from tag import __version__
from tag.cli.util import Parser
from tag.errors import InputError
from tag.memory import keep_freed_memory, use_huge_pages

# verb name -> module in tag.cli; each module has add_parser(subparsers) and run(args) -> int
VERBS = ["inspect", "topo", "simulate", "plan", "report", "deploy", "profile", "train", "bench"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tag",
        description="Plan and run distributed DNN training on heterogeneous clusters.",
        epilog="example:\n  tag plan datasets/models/resnet50.onnx datasets/topologies/heterog8.json -o plan.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tag {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal failures")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        try:
            mod = importlib.import_module(f"tag.cli.{verb}")
        except ModuleNotFoundError as e:
            if e.name == f"tag.cli.{verb}":
                continue  # verb not built yet
            raise
        p = mod.add_parser(sub)
        p.set_defaults(_run=mod.run)
        _remember_parsers(p)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of internal failures")
    return parser


def _remember_parsers(p: argparse.ArgumentParser) -> None:
    """Set `_parser` on `p` and on its actions' parsers, so errors after parsing come from the innermost one."""
    p.set_defaults(_parser=p)
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _remember_parsers(child)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the verb's parser: `tag plan: error: unrecognized arguments: ...`
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    use_huge_pages()  # before any verb imports torch (tag.memory)
    keep_freed_memory()  # a step's freed tensors stay for the next step, here and in every process it starts
    if not args.debug:
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        os.environ.setdefault("PYTHONWARNINGS", "ignore")
    try:
        return int(args._run(args) or 0)
    except InputError as e:
        sys.stderr.write(f"tag {args.verb}: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("tag: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # internal failure
        if args.debug:
            raise
        msg = str(e).splitlines()[0] if str(e) else ""
        sys.stderr.write(f"tag {args.verb}: internal error: {type(e).__name__}: {msg} (rerun with --debug for the traceback)\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
