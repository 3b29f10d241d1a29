"""GNN checkpoints: save, load (``torch.load(weights_only=True)``), the metadata card, the shipped weights.

A checkpoint is one dict of plain values and tensors:

    {"format": "tag-gnn", "feature_version": 2, "config": {"hidden": 64, "layers": 3, "heads": 4, "conv": "transformer"},
     "model": state_dict, "optimizer": state_dict | None,
     "progress": {"episodes": 12, "steps": 96, "seed": 0},
     "card": {"data": {...}, "metrics": {...}, "created": "...", "command": "tag train ..."}}

Loading a checkpoint whose feature version differs from this code's `FEATURE_VERSION` is an `InputError`
(the features it was trained on are not the ones we build). The card is also written next to it as
``<ckpt>.card.json`` for people to read.
"""

from __future__ import annotations

import json
import os

from tag.errors import InputError
from tag.fileio import atomic_write, write_text_atomic
from tag.gnn.data import FEATURE_VERSION
from tag.gnn.shipped import SHIPPED_STRUCTURE_NAME, shipped_checkpoint  # noqa: F401 (re-exported)

FORMAT = "tag-gnn"
STRUCTURE_FORMAT = "tag-structure-gnn"  # the structure network (`tag.gnn.structure_model`), same layout
SHIPPED_NAME = "tag-gnn-v3.pt"


def default_checkpoint() -> str | None:
    """Path of the shipped pretrained weights (package data of `tag.gnn`), or None if absent."""
    return shipped_checkpoint(SHIPPED_NAME)


def default_structure_checkpoint() -> str | None:
    """Path of the shipped structure network's weights, or None if absent."""
    return shipped_checkpoint(SHIPPED_STRUCTURE_NAME)


def save_checkpoint(path: str, net, *, optimizer=None, progress: dict | None = None,
                    card: dict | None = None, fmt: str = FORMAT) -> None:
    """Write a checkpoint of `net` (a TagGNN, or with `fmt` = STRUCTURE_FORMAT a StructureNet) atomically (temp
    file + rename) and its ``.card.json``."""
    import torch

    obj = {"format": fmt, "feature_version": FEATURE_VERSION, "config": dict(net.config),
           "model": net.state_dict(), "optimizer": optimizer.state_dict() if optimizer is not None else None,
           "progress": dict(progress or {}), "card": dict(card or {})}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda f: torch.save(obj, f), binary=True)
    card_json = json.dumps({"feature_version": FEATURE_VERSION, "config": obj["config"], "progress": obj["progress"],
                            **obj["card"]}, indent=2, sort_keys=True)
    write_text_atomic(path + ".card.json", card_json + "\n")


def _torch_load(path: str):
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def _as_numpy(obj):
    """`obj` with every torch tensor as a numpy array (dicts, lists and tuples walked)."""
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):
        return obj.detach().cpu().numpy()
    if isinstance(obj, dict):
        return type(obj)((k, _as_numpy(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_as_numpy(v) for v in obj)
    return obj


def read_checkpoint(path: str, fmt: str = FORMAT, arrays: str = "torch") -> dict:
    """The raw checkpoint dict, checked for format `fmt` and feature version (InputError otherwise); tensors as
    torch tensors (`arrays` "torch": ``torch.load(weights_only=True)``) or numpy arrays ("numpy":
    `tag.gnn.pt_reader`, without importing torch; torch.load's result converted when the reader refuses the
    archive)."""
    path = str(path)
    if not os.path.isfile(path):
        raise InputError(path, "file", "an existing GNN checkpoint", "no such file")
    try:
        obj = None
        if arrays == "numpy":
            from tag.gnn.pt_reader import read_torch_file

            try:
                obj = read_torch_file(path)
            except ValueError:  # an archive the reader does not know (e.g. another torch's format): torch reads it
                obj = _as_numpy(_torch_load(path))
        if obj is None:
            obj = _torch_load(path)
    except Exception as e:  # not a torch file, or not loadable with weights_only
        raise InputError(path, "file", "a tag GNN checkpoint (torch.save of plain values)",
                         f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}") from None
    if not isinstance(obj, dict) or obj.get("format") != fmt:
        raise InputError(path, "format", f"'{fmt}'", repr(obj.get("format") if isinstance(obj, dict) else type(obj).__name__))
    fv = obj.get("feature_version")
    if fv != FEATURE_VERSION:
        raise InputError(path, "feature_version", f"feature version {FEATURE_VERSION} (this tag's features; "
                         "retrain with `tag train` or use a matching tag)", repr(fv))
    return obj


def load_checkpoint(path: str, fmt: str = FORMAT) -> tuple:
    """(network in eval mode, raw checkpoint dict) from a checkpoint file: a TagGNN, or a StructureNet when
    `fmt` is STRUCTURE_FORMAT."""
    obj = read_checkpoint(path, fmt)
    cfg = obj.get("config") or {}
    try:
        if fmt == STRUCTURE_FORMAT:
            from tag.gnn.structure_model import StructureNet
            net = StructureNet(**cfg)
        else:
            from tag.gnn.model import TagGNN
            net = TagGNN(**cfg)
        net.load_state_dict(obj["model"])
    except (TypeError, KeyError, RuntimeError, ValueError) as e:
        raise InputError(str(path), "model", "weights matching the network's configuration",
                         f"{type(e).__name__}: {str(e).splitlines()[0][:80]}") from None
    net.eval()
    return net, obj


def load_inference_net(path: str, fmt: str = FORMAT):
    """The network of a checkpoint for inference in numpy (`tag.gnn.infer`: a NumpyTagGNN, or with `fmt` =
    STRUCTURE_FORMAT a NumpyStructureNet), read without importing torch; InputError for a bad checkpoint or one
    whose weights do not match its configuration (`tag.gnn.infer.check_weights`)."""
    from tag.gnn.infer import NumpyStructureNet, NumpyTagGNN, check_weights

    obj = read_checkpoint(path, fmt, arrays="numpy")
    cfg, state = obj.get("config") or {}, obj.get("model")
    try:
        if not isinstance(state, dict):
            raise ValueError("no state dict under 'model'")
        check_weights(cfg, state, structure=fmt == STRUCTURE_FORMAT)
        return NumpyStructureNet(cfg, state) if fmt == STRUCTURE_FORMAT else NumpyTagGNN(cfg, state)
    except (TypeError, KeyError, ValueError) as e:
        raise InputError(str(path), "model", "weights matching the network's configuration",
                         f"{type(e).__name__}: {str(e).splitlines()[0][:80]}") from None
