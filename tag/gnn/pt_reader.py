"""Read a checkpoint that `torch.save` wrote, without importing torch: tensors come back as numpy arrays.

`tag plan` only evaluates the shipped networks (`tag.gnn.infer`), and importing torch costs more than a small plan.
A `torch.save` file is a zip archive: ``<root>/data.pkl`` pickles the object, each tensor as

    torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks)

where `storage` is a persistent id ``("storage", torch.<Type>Storage, key, location, numel)`` naming the raw
little-endian bytes in ``<root>/data/<key>``. The tensor is then ``as_strided(storage[offset:], size, stride)``
(strides in elements). Only the globals such checkpoints hold are resolved (the storage types below,
`collections.OrderedDict`, the tensor rebuild); anything else is a `ValueError`, as ``torch.load(weights_only=True)``
refuses it too.
"""

from __future__ import annotations

import collections
import pickle
import zipfile

import numpy as np

STORAGE_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
                  "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
                  "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


class _StorageType:
    """Stands for torch.<name>Storage in the pickle: its numpy dtype."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype).newbyteorder("<")


def _rebuild_tensor(storage: np.ndarray, offset: int, size, stride, requires_grad=False, hooks=None, *_):
    """The numpy array of a `_rebuild_tensor_v2` call (a copy, C-contiguous, in native byte order, 0-d kept)."""
    item = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride))
    return np.array(view, dtype=storage.dtype.newbyteorder("="), order="C")  # (ascontiguousarray makes 0-d 1-d)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, root: str):
        super().__init__(file)
        self.archive, self.root, self.storages = archive, root, {}

    def find_class(self, module: str, name: str):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(STORAGE_DTYPES[name])
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        raise ValueError(f"unsupported global {module}.{name} in the checkpoint")

    def persistent_load(self, pid):
        kind, stype, key, _location, numel = pid
        if kind != "storage" or not isinstance(stype, _StorageType):
            raise ValueError(f"unsupported persistent id {pid!r} in the checkpoint")
        if key not in self.storages:
            raw = self.archive.read(f"{self.root}/data/{key}")
            self.storages[key] = np.frombuffer(raw, dtype=stype.dtype, count=int(numel))
        return self.storages[key]


def read_torch_file(path: str):
    """The object `torch.save` wrote to `path`, tensors as numpy arrays (`ValueError` for a file that is not such
    an archive or holds objects beyond plain values and tensors)."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise ValueError(f"not a torch.save zip archive ({e})") from None
    with archive:
        pkl = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise ValueError("not a torch.save zip archive (no <root>/data.pkl)")
        root = pkl[0].split("/")[0]
        order = f"{root}/byteorder"
        if order in archive.namelist() and archive.read(order).strip() != b"little":
            raise ValueError("a big-endian torch.save archive")
        with archive.open(pkl[0]) as f:
            return _Unpickler(f, archive, root).load()
