"""Deploy checkpoints (`--checkpoint DIR`) and trained-weight exports (`--export`).

A checkpoint folder holds ``checkpoint.json`` (the commit point: format, step, identity, the state file's name)
and ``state-<step>.pt``: ``{"weights": {param: tensor}, "optimizer": {param: {key: tensor}}, "step": k}`` keyed
by the model's parameter names (the ONNX initializer names, which the PyTorch exporter takes from the module), so
it does not depend on the rank count; ``torch.load(path, weights_only=True)["weights"]`` is a state_dict.
Nothing else needs saving: the data order and dropout masks are functions of (seed, step) (`tag.deploy.sampler`).
A save writes the state file to a temporary name and renames it, then replaces checkpoint.json the same way,
then deletes older state files, so a crash at any point leaves the previous checkpoint loadable.

Identity: a checkpoint belongs to one model (sha256 of the file), one plan (sha256), one optimizer and learning
rate, one seed, loss, dataset length and global batch; resuming with any of them changed is an InputError.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from tag.errors import InputError, short_repr
from tag.fileio import atomic_write, file_mode_for, write_text_atomic
from tag.graph.reader import file_sha256

FORMAT = "tag-deploy-checkpoint"
META = "checkpoint.json"


@dataclass(frozen=True)
class Identity:
    """What a checkpoint must agree with to be resumed."""

    model_sha256: str
    plan_sha256: str
    optimizer: str
    lr: float
    seed: int
    loss: str
    data: str | None  # the --data spec, None for synthetic data
    dataset_rows: int | None
    batch_rows: int


def read_meta(folder: str) -> dict | None:
    """The checkpoint.json of `folder`; None when the folder does not exist or is empty (a fresh start).

    InputError when the folder holds other files but no tag checkpoint.
    """
    if not os.path.exists(folder):
        return None
    if not os.path.isdir(folder):
        raise InputError("--checkpoint", folder, "a folder for tag's checkpoint", "a file")
    path = os.path.join(folder, META)
    if not os.path.isfile(path):
        if os.listdir(folder):
            raise InputError("--checkpoint", folder, "an empty folder or a tag checkpoint (checkpoint.json)",
                             "other files and no checkpoint.json")
        return None
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(path, "file", "a tag checkpoint's JSON", short_repr(str(e))) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("step"), int):
        raise InputError(path, "format", f"{FORMAT!r} with an integer step", short_repr(meta.get("format")
                                                                                         if isinstance(meta, dict) else meta))
    if not os.path.isfile(os.path.join(folder, str(meta.get("state", "")))):
        raise InputError(path, "state", "the name of a state file in the folder", short_repr(meta.get("state")))
    return meta


def resume_step(folder: str | None, identity: Identity, steps: int) -> int:
    """The step a run continues from: 0 without a checkpoint, else its step (InputError on any mismatch).

    `steps` is the requested total; a checkpoint already at or past it is an error (nothing would run).
    """
    if folder is None:
        return 0
    meta = read_meta(folder)
    if meta is None:
        return 0
    path = os.path.join(folder, META)
    saved = meta.get("identity", {})
    names = {"model_sha256": "the model", "plan_sha256": "the plan", "optimizer": "the optimizer",
             "lr": "the learning rate", "seed": "--seed", "loss": "--loss", "data": "--data",
             "dataset_rows": "the dataset's length", "batch_rows": "the global batch"}
    for key, value in asdict(identity).items():
        if saved.get(key) != value:
            raise InputError(path, f"identity.{key}", f"{short_repr(value)} ({names[key]} of this run)",
                             f"{short_repr(saved.get(key))}: the checkpoint belongs to another run")
    if meta["step"] >= steps:
        raise InputError("--steps", "N", f"a total above the checkpoint's step {meta['step']} ({path})", str(steps))
    return int(meta["step"])


def load_state(folder: str) -> dict:
    """The saved state: {"weights": {name: tensor}, "optimizer": {name: {key: tensor}}, "step": k}."""
    import torch

    meta = read_meta(folder)
    return torch.load(os.path.join(folder, meta["state"]), weights_only=True)


def load_weights(folder_or_file: str) -> dict:
    """A state_dict of trained weights from a checkpoint folder or a `--export` .pt file."""
    import torch

    if os.path.isdir(folder_or_file):
        return load_state(folder_or_file)["weights"]
    return torch.load(folder_or_file, weights_only=True)


def save(folder: str, identity: Identity, step: int, weights: dict, optimizer: dict) -> None:
    """Write a checkpoint at `step` (atomically, see the module docstring)."""
    import torch

    os.makedirs(folder, exist_ok=True)
    name = f"state-{step}.pt"
    atomic_write(os.path.join(folder, name),
                 lambda f: torch.save({"weights": weights, "optimizer": optimizer, "step": step}, f), binary=True)
    write_text_atomic(os.path.join(folder, META), json.dumps(
        {"format": FORMAT, "step": step, "state": name, "identity": asdict(identity)}, indent=1) + "\n")
    for other in os.listdir(folder):
        if other.startswith("state-") and other.endswith(".pt") and other != name:
            os.remove(os.path.join(folder, other))


def optimizer_state_by_name(optimizer, names: list[str]) -> dict:
    """{param name: its optimizer state} of a torch optimizer built over params `names` in that order."""
    if optimizer is None:
        return {}
    state = optimizer.state_dict()["state"]
    return {n: {k: v.detach().cpu().clone() if hasattr(v, "detach") else v for k, v in state[i].items()}
            for i, n in enumerate(names) if i in state}


def load_optimizer_state(optimizer, names: list[str], by_name: dict) -> None:
    """Set the state of `optimizer` (built over params `names` in order) from `optimizer_state_by_name`'s dict."""
    if optimizer is None:
        return
    sd = optimizer.state_dict()
    sd["state"] = {i: by_name[n] for i, n in enumerate(names) if n in by_name}
    optimizer.load_state_dict(sd)


def export_weights(path: str, weights: dict, model_path: str) -> None:
    """Write trained `weights` to `path`: a torch state_dict (.pt/.pth) or the ONNX model with trained initializers.

    For .onnx every parameter must be an initializer or a graph input of the model (a graph input gets an
    initializer); InputError naming the first parameter that is neither (generated by nodes). A model whose file
    keeps its weights in external data, or whose initializers come near protobuf's 2 GiB limit, is written as
    `path` plus one data file `path`.data (`_save_external`).
    """
    import torch

    if path.endswith(".onnx"):
        import onnx
        from onnx import numpy_helper

        model = onnx.load(model_path)
        inits = {t.name: i for i, t in enumerate(model.graph.initializer)}
        inputs = {i.name for i in model.graph.input}
        for name, value in weights.items():
            arr = value.detach().cpu().numpy()
            if name in inits:
                old = model.graph.initializer[inits[name]]
                arr = arr.astype(numpy_helper.to_array(old).dtype)
                model.graph.initializer[inits[name]].CopyFrom(numpy_helper.from_array(arr, name))
            elif name in inputs:
                model.graph.initializer.append(numpy_helper.from_array(arr, name))
            else:
                raise InputError("--export", path, f"a model whose parameter '{name}' is an initializer (use .pt)",
                                 "a parameter computed by nodes")
        if _uses_external_data(model_path) or sum(t.ByteSize() for t in model.graph.initializer) > EXTERNAL_ABOVE_BYTES:
            _save_external(model, path)
        else:
            atomic_write(path, lambda f: f.write(model.SerializeToString()), binary=True)
        return
    atomic_write(path, lambda f: torch.save({k: v.detach().cpu() for k, v in weights.items()}, f), binary=True)


EXTERNAL_ABOVE_BYTES = 0.9 * (2 ** 31 - 1)  # protobuf cannot serialise a message of 2 GiB or more


def _uses_external_data(model_path: str) -> bool:
    import onnx
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in onnx.load(model_path, load_external_data=False).graph.initializer)


def _save_external(model, path: str) -> None:
    """Write `model` as `path` + `path`.data (every initializer in the data file), both made in a
    temporary folder beside `path` and renamed into place, the data file first (the .onnx rename is the commit)."""
    import shutil
    import tempfile

    import onnx

    folder = os.path.dirname(os.path.abspath(path))
    data_name = os.path.basename(path) + ".data"
    tmp = tempfile.mkdtemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        onnx.save_model(model, os.path.join(tmp, "model.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=data_name, size_threshold=0)
        for name, final in ((data_name, os.path.join(folder, data_name)), ("model.onnx", path)):
            if not os.path.exists(os.path.join(tmp, name)):  # a model without initializers has no data file
                continue
            os.chmod(os.path.join(tmp, name), file_mode_for(final))  # as a plain write would make it
            os.replace(os.path.join(tmp, name), final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def gather_state(program, weights: dict, optimizer_state: dict, rank: int, world: int) -> tuple[dict, dict] | None:
    """On rank 0: (weights of every parameter, optimizer state by name), each from a rank that trains it.

    `weights` / `optimizer_state`: this rank's trained parameters' full values and optimizer states by name
    (`RankRuntime.trained_weights` / `optimizer_state`: ZeRO shards already gathered). Every rank must call it (a
    gather over all ranks). A parameter no rank trains keeps rank 0's value. Other ranks get None.
    """
    local = ({n: v.detach().cpu().clone() for n, v in weights.items()}, optimizer_state)
    if world > 1:
        import torch.distributed as dist

        parts = [None] * world if rank == 0 else None
        dist.gather_object(local, parts, dst=0)
    else:
        parts = [local]
    if rank != 0:
        return None
    weights = {n: program.param(n).detach().cpu().clone() for n in program.param_names}
    opt: dict = {}
    for w, o in reversed(parts):  # the lowest rank training a parameter wins
        weights.update(w)
        opt.update(o)
    return weights, opt
