"""CLI conventions in one place: output (table or one JSON object), progress bars, shared flags.

Every verb module in `tag/cli/` defines ``add_parser(subparsers)`` (flags and help with an example;
no heavy imports at module level) and ``run(args) -> int``. `tag/cli/__init__.py` wires them and turns
`InputError` into exit 2 with one stderr line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import threading
from typing import Any, Sequence

from tag.errors import InputError
from tag.textfmt import table  # noqa: F401  (verbs import it from here)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: ``tag VERB: error: MESSAGE (see tag VERB --help)``, exit 2.

    argparse's default prints the whole usage block first; sub-parsers made with `add_subparsers` inherit
    this class, so every verb and action reports the same way.
    """

    def error(self, message: str):
        one_line = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {one_line} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (e.g. a count of playouts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, found {value}")
    return value


# the baselines `--baseline` accepts (tag.search.baselines.BASELINES, whose import this module avoids)
BASELINE_NAMES = ["dp-even", "dp-proportional", "ps", "single-device", "m-etf", "m-topo"]


def add_verb(subparsers, name: str, help: str, example: str, description: str | None = None,
             notes: str | None = None) -> argparse.ArgumentParser:
    """Add a verb (or a verb's action, e.g. `topo random`) whose --help has a description and an example.

    notes: text printed after the example (e.g. exit codes).
    """
    return subparsers.add_parser(
        name,
        help=help,
        description="\n".join(textwrap.fill(par, width=100) for par in (description or help).split("\n")),
        epilog=f"example:\n  {example}" + (f"\n\n{notes}" if notes else ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of tables")


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """The flags every verb that reads a model takes (DESIGN.md § Command line)."""
    p.add_argument("--batch-size", type=int, default=None, metavar="B",
                   help="global batch (default: the file's batch if above 1, else 32 per device)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                   help="shape of a data input with symbolic dims, e.g. x=1x3x224x224 (repeatable)")
    p.add_argument("--data-input", action="append", default=[], metavar="NAME",
                   help="name a graph input as a data input (repeatable)")
    p.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="adam",
                   help="optimizer whose state and update are costed (default adam)")


PRECISION_NAMES = ["fp32", "tf32", "fp16", "bf16"]  # tag.strategy.memory_decisions.PRECISIONS


def add_precision_flag(p: argparse.ArgumentParser, chooses: str) -> None:
    """``--precision fp32|tf32|fp16|bf16``; `chooses` says what happens without it (the verb's default)."""
    p.add_argument("--precision", choices=PRECISION_NAMES, default=None, metavar="P",
                   help="training precision: fp32; tf32 (fp32 storage, tensor-core matmuls; Ampere or later); "
                        "fp16 / bf16 mixed precision (16-bit compute and activations, fp32 master weights, gradients "
                        "and optimizer states; fp16 with loss scaling; changes the numerics). Every device type must "
                        f"support it (exit 2 otherwise). Without it: {chooses}")


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=1x3x48x320`` flags into a dict."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.lower().split("x"))
            if any(d <= 0 for d in out[name]):
                raise ValueError
        except ValueError:
            raise InputError("--input-shape", spec, "NAME=DIMS with positive dims like x=1x3x224x224", repr(spec)) from None
    return out


def check_outputs(args: argparse.Namespace, outputs: dict[str, str], inputs: Sequence[str | None]) -> None:
    """Check the output paths given on the command line before any work (tag.fileio.check_output_paths).

    outputs: {args attribute: flag as the user writes it}, e.g. {"output": "-o/--output", "trace": "--trace"}.
    """
    from tag.fileio import check_output_paths

    check_output_paths([(flag, getattr(args, attr, None)) for attr, flag in outputs.items()], inputs)


def emit(args: argparse.Namespace, obj: Any, human: str) -> None:
    """Print `human` text, or `obj` as one JSON object when --json was given."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(obj, sort_keys=False) + "\n")
    else:
        sys.stdout.write(human.rstrip("\n") + "\n")


HEARTBEAT_S = 1.0  # an open bar on a terminal is redrawn at least this often (`progress`)
# held while a heartbeat redraws. `os.fork` (the search's worker processes) takes it first, so no child is forked while
# a heartbeat holds stderr's lock (the child would block on its first write); both sides release it after the fork
_REDRAW = threading.Lock()
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(before=_REDRAW.acquire, after_in_parent=_REDRAW.release, after_in_child=_REDRAW.release)


def progress(total: int | None = None, desc: str = "", unit: str = "it"):
    """A progress bar on stderr (tqdm); hidden when stderr is not a terminal. While a shown bar is open, a daemon
    thread redraws it every HEARTBEAT_S seconds, so its elapsed time runs through long stretches in which no unit
    ends (a plan's starts and refinement, one ablation case); `close()` stops the thread."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=None, leave=False, dynamic_ncols=True)
    if not bar.disable:
        _keep_redrawing(bar, HEARTBEAT_S)
    return bar


def _keep_redrawing(bar, interval_s: float) -> threading.Thread:
    """Redraw `bar` every `interval_s` seconds on a daemon thread until `bar.close()` (wrapped to stop it first)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval_s):
            with _REDRAW:
                if not stop.is_set():
                    bar.refresh()

    close = bar.close

    def close_and_stop() -> None:
        stop.set()
        close()

    bar.close = close_and_stop
    thread = threading.Thread(target=beat, name="progress-heartbeat", daemon=True)
    thread.start()
    return thread

