"""Where `tag bench` finds its files: package data first for what a wheel ships, `datasets/` for the rest.

Package data (`tag/bench/data/`, found with `importlib.resources`, so a wheel install has it):
    models/<name>.onnx          the quick suite's models and the datasets graphs the published comparison uses
    topologies/<name>.json      the quick suite's topologies
    published/*.json            the published measurement tables (each row names its source)
    published/models/*.onnx     graphs of the published comparison that datasets/ does not hold

In the source tree `models/` and `topologies/` are symbolic links into `datasets/` (one copy of each file in the
repository); building a wheel copies the files they point to. The full suite's other models and topologies are
read from a `datasets/` directory: the one passed by the caller, else the source checkout's.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from tag.errors import InputError


def package_data(*parts: str) -> Path:
    """Path of a file or directory under tag/bench/data/ (it may not exist)."""
    return Path(str(files("tag.bench").joinpath("data", *parts)))


def checkout_datasets() -> Path | None:
    """The `datasets/` directory of the source checkout this package runs from (editable install), or None."""
    root = Path(__file__).resolve().parents[2] / "datasets"
    return root if (root / "models").is_dir() and (root / "topologies").is_dir() and (root / "zoo").is_dir() else None


@dataclass(frozen=True)
class CaseFiles:
    """The model and topology files of one suite case."""

    model_path: Path
    topology_path: Path


def case_files(model: str, topology: str, datasets_dir: str | Path | None = None) -> CaseFiles:
    """The files of `model` x `topology`: from `datasets_dir` when given (or the checkout's datasets/), else the
    package data. InputError (one line naming the missing file or directory and what to pass) when absent."""
    if datasets_dir is not None:
        root = Path(datasets_dir)
        if not (root / "models").is_dir():
            raise InputError("--datasets", str(root), "a tag datasets/ directory holding models/ and topologies/",
                             f"no directory {root / 'models'}")
        return CaseFiles(_existing(root / "models" / f"{model}.onnx", "--models", model),
                         _existing(root / "topologies" / f"{topology}.json", "--topologies", topology))
    checkout = checkout_datasets()
    if checkout is not None:
        return case_files(model, topology, checkout)
    m, t = package_data("models", f"{model}.onnx"), package_data("topologies", f"{topology}.json")
    for path in (m, t):
        if not path.exists():
            kind = path.parent.name  # "models" or "topologies"
            shipped = ", ".join(sorted(p.stem for p in package_data(kind).glob("*")))
            raise InputError("datasets/", f"{kind}/{path.name}",
                             f"--datasets DIR naming a tag source checkout's datasets/ directory (this install "
                             f"ships only the {kind} {shipped}; --quick uses them)",
                             "no datasets/ directory beside this install")
    return CaseFiles(m, t)


def _existing(path: Path, flag: str, name: str) -> Path:
    if not path.exists():
        raise InputError(str(path), flag, f"a {path.parent.name[:-1]} named {name} in {path.parent}", "no such file")
    return path


def published_table(name: str) -> Path:
    """A published measurement table shipped with the package: "gpu-training-throughput.json" or "scaling.json"."""
    return package_data("published", name)


def published_graph(key: str) -> Path:
    """A graph of the published comparison: the datasets graphs in models/, the others in published/models/."""
    for path in (package_data("published", "models", f"{key}.onnx"), package_data("models", f"{key}.onnx")):
        if path.exists():
            return path
    raise InputError(str(package_data("published", "models")), key, "the graph of this published row",
                     "not in this install")
