"""Model graphs: ONNX loading into an `OpGraph` (`load_model`) and op-group coarsening.

`load_model` is imported lazily so that `tag.graph.opgraph` stays cheap to import.
"""

from __future__ import annotations

__all__ = ["load_model"]


def __getattr__(name):
    if name == "load_model":
        from tag.graph.load import load_model

        return load_model
    raise AttributeError(f"module 'tag.graph' has no attribute {name!r}")
