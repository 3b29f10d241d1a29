"""The shipped checkpoints' file names and paths (package data of `tag.gnn`, under pretrained/). No heavy import."""

from __future__ import annotations

from importlib import resources

SHIPPED_STRUCTURE_NAME = "tag-structure-v2.pt"


def shipped_checkpoint(name: str) -> str | None:
    """Path of the shipped weights file `name` (package data of `tag.gnn`, under pretrained/), or None if absent."""
    try:
        p = resources.files("tag.gnn").joinpath("pretrained", name)
        if p.is_file():
            return str(p)
    except (ModuleNotFoundError, FileNotFoundError):
        pass
    return None
