"""User data for deploy: `--data` / `--loss` specs, the dataset's checks against the model, and batch loading.

A spec ``module:name`` imports ``module``; ``path/to/file.py:name`` loads that file. For `--data` the name is a
factory called with no arguments that returns a map-style dataset (``len(ds)``, ``ds[i] -> (inputs, target)``)
or a pair ``(X, y)`` of equally long arrays or tensors. ``inputs`` is one array (one data input), a sequence in
the model's data-input order, or a dict by input name. Float inputs of any float dtype are cast to the model's
float dtype; an integer or bool input must match the model's kind. The prediction is the model's first graph
output (batch axis 0); the target is checked against it and the loss (`tag.deploy.loss`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from tag.deploy.data import batch_shape, torch_dtype
from tag.deploy.loss import CLASS_LABEL_LOSSES, IGNORE_INDEX, LOSS_NAMES, Loss, class_axis
from tag.errors import InputError, short_repr


def load_callable(spec: str, flag: str) -> Callable:
    """The callable `spec` names (``module:name`` or ``file.py:name``); InputError(flag, ...) otherwise."""
    mod_part, sep, name = spec.rpartition(":")
    if not sep or not mod_part or not name.isidentifier():
        raise InputError(flag, "spec", "module:name or path/to/file.py:name", short_repr(spec))
    try:
        if mod_part.endswith(".py"):
            if not os.path.isfile(mod_part):
                raise InputError(flag, "spec", "an existing Python file before ':'", short_repr(mod_part))
            key = "tag_user_" + os.path.splitext(os.path.basename(mod_part))[0]
            mspec = importlib.util.spec_from_file_location(key, os.path.abspath(mod_part))
            module = importlib.util.module_from_spec(mspec)
            sys.modules[key] = module
            mspec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_part)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module failed to import
        raise InputError(flag, "spec", f"an importable module ({mod_part})",
                         _one_line(e)) from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise InputError(flag, "spec", f"a callable named {name!r} in {mod_part}",
                         "nothing" if fn is None else type(fn).__name__)
    return fn


def _one_line(e: Exception) -> str:
    """'Type: message' of an exception from user code, on one line and at most ~100 characters."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:97] + '...' if len(text) > 100 else text}"


def absolute_spec(spec: str) -> str:
    """`spec` with a file path made absolute (ranks may start in another directory)."""
    mod_part, sep, name = spec.rpartition(":")
    if sep and mod_part.endswith(".py"):
        return os.path.abspath(mod_part) + ":" + name
    return spec


def resolve_loss(spec: str | None) -> Loss:
    """A loss name or a ``module:function`` spec as a Loss; None means mse."""
    if spec is None or spec == "mse":
        return Loss("mse")
    if spec in LOSS_NAMES:
        return Loss(spec)
    if ":" not in spec:
        raise InputError("--loss", "name", f"one of {', '.join(LOSS_NAMES)} or module:function", short_repr(spec))
    return Loss(spec, load_callable(spec, "--loss"))


class ArrayDataset:
    """A dataset over arrays: ds[i] = (X[i], y[i]); `rows(indices)` takes many rows at once."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        x = self.x
        if isinstance(x, dict):
            return {k: v[i] for k, v in x.items()}, self.y[i]
        if isinstance(x, (list, tuple)) and x and _is_array(x[0]):
            return type(x)(v[i] for v in x), self.y[i]
        return x[i], self.y[i]

    def rows(self, idx: list[int]):
        return _take(self.x, idx), _take(self.y, idx)

    @property
    def targets(self):
        return self.y


def _take(a, idx):
    if isinstance(a, dict):
        return {k: _take(v, idx) for k, v in a.items()}
    if isinstance(a, (list, tuple)) and a and _is_array(a[0]):  # one array per data input
        return type(a)(_take(v, idx) for v in a)
    if isinstance(a, torch.Tensor):
        return a[torch.as_tensor(idx, dtype=torch.long)]
    return np.asarray(a)[np.asarray(idx, dtype=np.int64)]


def _is_array(a) -> bool:
    return isinstance(a, (np.ndarray, torch.Tensor))


def make_dataset(spec: str):
    """Call the `--data` factory and return a map-style dataset (InputError naming `spec` if it is none)."""
    factory = load_callable(spec, "--data")
    try:
        ds = factory()
    except Exception as e:  # noqa: BLE001 - the user's factory failed
        raise InputError("--data", spec, "a factory that returns a dataset",
                         _one_line(e)) from None
    if isinstance(ds, tuple) and len(ds) == 2:  # (X, y)
        x = ds[0]
        nx = len(next(iter(x.values()))) if isinstance(x, dict) else len(x[0]) \
            if isinstance(x, (list, tuple)) and x and _is_array(x[0]) else len(x)
        if nx != len(ds[1]):
            raise InputError("--data", spec, "(X, y) with as many rows in X as in y", f"{nx} and {len(ds[1])} rows")
        return ArrayDataset(*ds)
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise InputError("--data", spec, "a map-style dataset (len and [i]) or a pair (X, y)", type(ds).__name__)
    return ds


@dataclass(frozen=True)
class DataShapes:
    """Per-row shapes and dtypes the dataset must supply: data inputs (model order) and the prediction."""

    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # (name, per-row shape, numpy dtype name)
    output: str
    output_row_shape: tuple[int, ...]
    output_dtype: str


def data_shapes(graph, model_path: str) -> DataShapes:
    """What `--data` rows must look like for `graph` (InputError when a data input or the output is not batched on axis 0)."""
    ins = []
    for name in graph.data_inputs:
        if graph.tensors[name].batch_axis != 0:
            raise InputError(model_path, f"input '{name}'", "a data input batched on axis 0 (for --data)",
                             f"batch axis {graph.tensors[name].batch_axis}")
        ins.append((name, tuple(batch_shape(graph, name, 1)[1:]), graph.tensors[name].dtype))
    out = graph.outputs[0]
    if graph.tensors[out].batch_axis != 0:
        raise InputError(model_path, f"output '{out}'", "a first graph output batched on axis 0 (the prediction)",
                         f"batch axis {graph.tensors[out].batch_axis}")
    return DataShapes(tuple(ins), out, tuple(batch_shape(graph, out, 1)[1:]), graph.tensors[out].dtype)


def _kind(dtype) -> str:
    d = dtype if isinstance(dtype, torch.dtype) else torch_dtype(np.dtype(dtype).name)
    return "float" if d.is_floating_point else "bool" if d == torch.bool else "integer"


def _as_tensor(x) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))


def _split_inputs(inputs, shapes: DataShapes, spec: str) -> list[Any]:
    names = [n for n, _, _ in shapes.inputs]
    if isinstance(inputs, dict):
        missing = [n for n in names if n not in inputs]
        if missing:
            raise InputError("--data", f"{spec}: inputs", f"a value for every data input ({', '.join(names)})",
                             f"no {missing[0]!r}")
        return [inputs[n] for n in names]
    if len(names) == 1:
        return [inputs]
    if not isinstance(inputs, (list, tuple)) or len(inputs) != len(names):
        raise InputError("--data", f"{spec}: inputs", f"{len(names)} arrays in the order {', '.join(names)}",
                         type(inputs).__name__)
    return list(inputs)


def check_dataset(ds, shapes: DataShapes, loss: Loss, batch_rows: int, spec: str) -> None:
    """InputError unless `ds` fits the model and loss: enough rows, per-row shapes and dtype kinds, labels."""
    n = len(ds)
    if n < batch_rows:
        raise InputError("--data", f"{spec}: len(dataset)", f"at least the plan's global batch of {batch_rows} rows",
                         str(n))
    item = ds[0]
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise InputError("--data", f"{spec}: dataset[0]", "a pair (inputs, target)", type(item).__name__)
    for (name, row_shape, dtype), x in zip(shapes.inputs, _split_inputs(item[0], shapes, spec)):
        t = _as_tensor(x)
        if tuple(t.shape) != row_shape or _kind(t.dtype) != _kind(dtype):
            raise InputError("--data", f"{spec}: dataset[0] input '{name}'",
                             f"shape {row_shape} of {_kind(dtype)} values (the model's per-row input)",
                             f"shape {tuple(t.shape)} of {t.dtype}")
    target = _as_tensor(item[1])
    if loss.fn is not None:
        return
    if loss.name in CLASS_LABEL_LOSSES:
        out_row = tuple(shapes.output_row_shape)
        if not out_row:
            raise InputError("--data", f"output '{shapes.output}'",
                             f"[rows, classes] (or [rows, positions..., classes]) scores for {loss.name}",
                             f"per-row shape {out_row}")
        axis = class_axis((1,) + out_row, (1,) + tuple(target.shape)) - 1  # the classes' axis within a row
        n_classes, positions = out_row[axis], out_row[:axis] + out_row[axis + 1:]
        if tuple(target.shape) != positions or _kind(target.dtype) != "integer":
            what = ("one integer class label per row" if not positions else
                    f"integer class labels of shape {positions} per row (one per position of the output {out_row})")
            raise InputError("--data", f"{spec}: dataset[0] target", f"{what} for {loss.name}",
                             f"shape {tuple(target.shape)} of {target.dtype}")
        labels = label_rows(ds).reshape(-1)
        labels = labels[labels != IGNORE_INDEX]  # padding (torch's ignore_index): no class
        if labels.numel() == 0:
            raise InputError("--data", f"{spec}: labels", f"at least one class label that is not {IGNORE_INDEX} "
                             "(the ignored padding label)", f"every label is {IGNORE_INDEX}")
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= n_classes:
            bad = lo if lo < 0 else hi
            raise InputError("--data", f"{spec}: labels", f"class indices in [0, {n_classes}) (the model's outputs), "
                             f"or {IGNORE_INDEX} for a position to ignore", str(bad))
        return
    if tuple(target.shape) != shapes.output_row_shape or _kind(target.dtype) != "float":
        raise InputError("--data", f"{spec}: dataset[0] target",
                         f"shape {shapes.output_row_shape} of float values (the model's per-row output) for {loss.name}",
                         f"shape {tuple(target.shape)} of {target.dtype}")


def label_rows(ds) -> torch.Tensor:
    """Every label of `ds`, [rows, P...]: its ``targets`` attribute if it has one (torchvision's convention), else
    ds[i][1]."""
    t = getattr(ds, "targets", None)
    if t is not None and len(t) == len(ds):
        labels = _as_tensor(t)
    else:
        labels = torch.stack([_as_tensor(ds[i][1]) for i in range(len(ds))])
    if _kind(labels.dtype) != "integer":
        raise InputError("--data", "labels", "integer class indices", str(labels.dtype))
    return labels


def load_rows(ds, idx: list[int], shapes: DataShapes, spec: str = "--data",
              device: torch.device | str = "cpu") -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Rows `idx` of `ds` stacked: ({input name: [rows, ...]} in the model's dtypes, target [rows, ...])."""
    if hasattr(ds, "rows"):
        xs, ys = ds.rows(idx)
        cols = [_as_tensor(x) for x in _split_inputs(xs, shapes, spec)]
        target = _as_tensor(ys)
    else:
        items = [ds[i] for i in idx]
        per_input = [_split_inputs(it[0], shapes, spec) for it in items]
        cols = [torch.stack([_as_tensor(p[k]) for p in per_input]) if items else None
                for k in range(len(shapes.inputs))]
        target = torch.stack([_as_tensor(it[1]) for it in items]) if items else None
    data = {}
    for k, (name, row_shape, dtype) in enumerate(shapes.inputs):
        dt = torch_dtype(dtype)
        col = cols[k] if cols[k] is not None else torch.zeros((0,) + row_shape)
        data[name] = col.to(device=device, dtype=dt)
    if target is None:
        target = torch.zeros((0,) + shapes.output_row_shape)
    if target.is_floating_point():
        target = target.to(torch_dtype(shapes.output_dtype))
    elif _kind(target.dtype) == "integer":
        target = target.long()
    return data, target.to(device)
