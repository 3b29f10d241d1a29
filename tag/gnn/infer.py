"""The networks' forward pass in numpy, for planning: `tag plan` evaluates the shipped weights and never trains, so
it need not import torch (which costs more than a small plan).

`NumpyTagGNN` computes `tag.gnn.model.TagGNN`'s policy priors and value, and `NumpyStructureNet`
`tag.gnn.structure_model.StructureNet`'s state embedding and heads, from the same state dict (parameter names as
the torch modules'), on one state graph (`tag.gnn.data.InstanceFeatures.state`, numpy arrays), in float32. The
formulas are the torch modules' (their docstrings); here:

    Linear:      x W^T + b
    LayerNorm:   (x - mean) / sqrt(var + 1e-5) * w + b        (var biased, over the last axis)
    segment softmax over edges j -> i:  exp(a_ij - max_i) / (sum_j exp(a_ij - max_i) + 1e-16)
    segment sum:  out_i = sum over edges j -> i (0 for a node no edge reaches)

Results agree with torch's to float32 rounding (summation order differs), which tests/gnn/test_infer.py checks
on datasets models and clusters against the torch modules.
"""

from __future__ import annotations

import math

import numpy as np

from tag.gnn.data import CAND_DIM, DEVICE_DIM, EDGE_DIMS, GLOBAL_DIM, GROUP_DIM, USES
from tag.gnn.graph import edge_type_key

LN_EPS = 1e-5  # torch.nn.LayerNorm's default, which the models use
GAT_SLOPE = 0.2  # GATv2Conv's LeakyReLU slope (tag.gnn.layers)


class Weights:
    """A state dict of numpy arrays (float32), read by prefix."""

    def __init__(self, state: dict):
        self.state = {k: np.asarray(v, dtype=np.float32) for k, v in state.items()}

    def linear(self, prefix: str, x: np.ndarray) -> np.ndarray:
        out = x @ self.state[prefix + ".weight"].T
        b = self.state.get(prefix + ".bias")
        return out + b if b is not None else out

    def mlp(self, prefix: str, x: np.ndarray, n_linear: int, relu_last: bool = False) -> np.ndarray:
        """nn.Sequential(Linear, ReLU, Linear, ReLU, ...): linears at indices 0, 2, 4, ..."""
        for i in range(n_linear):
            x = self.linear(f"{prefix}.{2 * i}", x)
            if i < n_linear - 1 or relu_last:
                x = np.maximum(x, 0.0)
        return x

    def layer_norm(self, prefix: str, x: np.ndarray) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + LN_EPS) * self.state[prefix + ".weight"] + self.state[prefix + ".bias"]


class Segments:
    """Reductions of per-edge rows into destination nodes `index` [E] (of `n` nodes) by sorting once."""

    def __init__(self, index: np.ndarray, n: int):
        self.n = n
        self.order = np.argsort(index, kind="stable")
        sorted_idx = index[self.order]
        first = np.ones(len(sorted_idx), dtype=bool)
        first[1:] = sorted_idx[1:] != sorted_idx[:-1]
        self.starts = np.flatnonzero(first)
        self.nodes = sorted_idx[self.starts]
        self.index = index

    def _reduce(self, ufunc, vals: np.ndarray, empty: float) -> np.ndarray:
        out = np.full((self.n,) + vals.shape[1:], empty, dtype=vals.dtype)
        if len(self.starts):
            out[self.nodes] = ufunc.reduceat(vals[self.order], self.starts, axis=0)
        return out

    def sum(self, vals: np.ndarray) -> np.ndarray:
        return self._reduce(np.add, vals, 0.0)

    def softmax(self, a: np.ndarray) -> np.ndarray:
        """Softmax of per-edge scores a [E, H] within each destination (`tag.gnn.segment.softmax`)."""
        m = self._reduce(np.maximum, a, 0.0)
        e = np.exp(a - m[self.index])
        return e / (self.sum(e) + 1e-16)[self.index]


class _Encoder:
    """TagGNN's encoder (`TagGNN.embed`) from the weights under `enc`, `convs` and `norms` prefixes."""

    def __init__(self, w: Weights, enc: str, convs: str, norms: str, layers: int, heads: int, hidden: int, conv: str):
        self.w, self.enc, self.convs, self.norms = w, enc, convs, norms
        self.layers, self.heads, self.C, self.conv = layers, heads, hidden // heads, conv

    def _transformer(self, p: str, x_src, x_dst, src, dst, attr, seg: Segments) -> np.ndarray:
        H, C, w = self.heads, self.C, self.w
        q = w.linear(p + ".lin_query", x_dst).reshape(-1, H, C)[dst]
        k = w.linear(p + ".lin_key", x_src).reshape(-1, H, C)[src]
        v = w.linear(p + ".lin_value", x_src).reshape(-1, H, C)[src]
        if p + ".lin_edge.weight" in w.state:
            e = w.linear(p + ".lin_edge", attr).reshape(-1, H, C)
            k, v = k + e, v + e
        alpha = seg.softmax((q * k).sum(axis=-1) / np.float32(math.sqrt(C)))
        return seg.sum(v * alpha[:, :, None]).reshape(-1, H * C)  # root_weight=False in TagGNN

    def _gatv2(self, p: str, x_src, x_dst, src, dst, attr, seg: Segments) -> np.ndarray:
        H, C, w = self.heads, self.C, self.w
        x_l = w.linear(p + ".lin_l", x_src).reshape(-1, H, C)
        x_j = x_l[src]
        z = w.linear(p + ".lin_r", x_dst).reshape(-1, H, C)[dst] + x_j
        if p + ".lin_edge.weight" in w.state:
            z = z + w.linear(p + ".lin_edge", attr).reshape(-1, H, C)
        z = np.where(z > 0, z, np.float32(GAT_SLOPE) * z)
        alpha = seg.softmax((z * w.state[p + ".att"]).sum(axis=-1))
        return seg.sum(x_j * alpha[:, :, None]).reshape(-1, H * C) + w.state[p + ".bias"]

    def embed(self, data) -> dict[str, np.ndarray]:
        w = self.w
        h = {t: w.linear(f"{self.enc}.{t}", data[t].x) for t in ("group", "device")}
        segs = {}
        for et in EDGE_DIMS:
            ei = data[et].edge_index
            segs[et] = Segments(ei[1], h[et[2]].shape[0])
        step = self._transformer if self.conv == "transformer" else self._gatv2
        for layer in range(self.layers):
            outs: dict[str, np.ndarray] = {}
            for et in EDGE_DIMS:
                s, _, t = et
                ei = data[et].edge_index
                y = step(f"{self.convs}.{layer}.convs.{edge_type_key(et)}", h[s], h[t], ei[0], ei[1], data[et].edge_attr,
                         segs[et])
                outs[t] = y if t not in outs else outs[t] + y
            h = {t: w.layer_norm(f"{self.norms}.{layer}.{t}", h[t] + np.maximum(outs[t], 0.0)) if t in outs else h[t]
                 for t in h}
        return h


def pool_state(data, h: dict[str, np.ndarray]) -> np.ndarray:
    """[1, 4 hidden + GLOBAL_DIM]: mean and max of the group and of the device embeddings, and `u`
    (`tag.gnn.model.pool_state` for one graph)."""
    g, d = h["group"], h["device"]
    return np.concatenate([g.mean(axis=0), g.max(axis=0), d.mean(axis=0), d.max(axis=0),
                           np.asarray(data.u, dtype=np.float32).reshape(-1)])[None, :]


class NumpyTagGNN:
    """`TagGNN` for inference on one state graph: `priors(data)` -> (policy priors [C] float64, value or None)."""

    def __init__(self, config: dict, state: dict):
        self.config = dict(config)
        hidden, layers, heads = config.get("hidden", 64), config.get("layers", 3), config.get("heads", 4)
        self.w = Weights(state)
        self.encoder = _Encoder(self.w, "enc", "convs", "norms", layers, heads, hidden, config.get("conv", "transformer"))

    def priors(self, data, with_value: bool = True) -> tuple[np.ndarray, float | None]:
        """The policy's softmax over the state's candidates (`TagGNN.policy_logits`, `policy_log_probs`) and, when the
        value head reads the shared encoder and `with_value`, its value (else None, as `tag.gnn.priors` skips it)."""
        h = self.encoder.embed(data)
        cx = data["cand"].x
        n_cand = cx.shape[0]
        src, dst = data[USES].edge_index
        pooled = Segments(dst, n_cand).sum(h["device"][src] * data[USES].edge_attr)
        cur = h["group"][data["group"].x[:, 8] > 0.5]
        if cx.shape[1] != CAND_DIM or len(cur) != 1:
            raise ValueError("a state graph with one current group and its candidates is needed")
        logits = self.w.mlp("cand", np.concatenate([np.repeat(cur, n_cand, axis=0), pooled, cx], axis=1), 3)[:, 0]
        p = softmax_priors(logits)
        value = None
        if with_value and not self.config.get("value_trunk"):
            value = float(self.w.mlp("value", pool_state(data, h), 3)[0, 0])
            if self.config.get("value_prior"):
                value += float(np.asarray(data.v_prior, dtype=np.float32).reshape(-1)[0])
        return p, value


class NumpyStructureNet:
    """`StructureNet` for inference: `state_embedding(data)` [1, hidden] and `heads(s, x, v_prior)`."""

    def __init__(self, config: dict, state: dict):
        self.config = dict(config)
        hidden, layers, heads = config.get("hidden", 64), config.get("layers", 3), config.get("heads", 4)
        self.w = Weights(state)
        self.encoder = _Encoder(self.w, "gnn.enc", "gnn.convs", "gnn.norms", layers, heads, hidden, "transformer")

    def state_embedding(self, data) -> np.ndarray:
        return self.w.mlp("state", pool_state(data, self.encoder.embed(data)), 2, relu_last=True)

    def heads(self, s: np.ndarray, x: np.ndarray, v_prior: float) -> tuple[np.ndarray, float]:
        """(action logits [A], value) of one decision point: s [1, hidden], x [A, ACTION_DIM]."""
        logits = self.w.mlp("policy", np.concatenate([np.repeat(s, x.shape[0], axis=0), x], axis=1), 3)[:, 0]
        value = float(self.w.mlp("value", s, 2)[0, 0]) + float(v_prior)
        return logits, value


def softmax_priors(logits: np.ndarray) -> np.ndarray:
    """exp(log(softmax(logits) + 1e-12)) in float32, as float64: what `model.policy_log_probs(...).exp()` and
    `structure_model.log_softmax_by(...).exp()` give for one decision point."""
    e = np.exp(logits - logits.max())
    return np.exp(np.log(e / (e.sum() + np.float32(1e-16)) + np.float32(1e-12))).astype(np.float64)


CONFIG_KEYS = ("hidden", "layers", "heads", "conv", "value_trunk", "value_prior")


def expected_shapes(config: dict, structure: bool = False) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape of the weights `NumpyTagGNN` (or, with `structure`, `NumpyStructureNet`) reads for
    `config` (the torch modules' names; a TagGNN's separate value encoder is not read and not listed)."""
    from tag.gnn.structure_features import ACTION_DIM

    unknown = set(config) - set(CONFIG_KEYS[:3] if structure else CONFIG_KEYS)
    if unknown:
        raise TypeError(f"unexpected configuration keys {sorted(unknown)}")
    hid, layers, heads = config.get("hidden", 64), config.get("layers", 3), config.get("heads", 4)
    conv = "transformer" if structure else config.get("conv", "transformer")
    if layers < 1 or hid % heads or conv not in ("transformer", "gatv2"):
        raise ValueError("need layers >= 1, hidden divisible by heads and conv 'transformer' or 'gatv2'")
    pre = "gnn." if structure else ""
    out: dict[str, tuple[int, ...]] = {}

    def lin(name: str, n_in: int, n_out: int, bias: bool = True) -> None:
        out[name + ".weight"] = (n_out, n_in)
        if bias:
            out[name + ".bias"] = (n_out,)

    lin(pre + "enc.group", GROUP_DIM, hid)
    lin(pre + "enc.device", DEVICE_DIM, hid)
    for layer in range(layers):
        for et, dim in EDGE_DIMS.items():
            p = f"{pre}convs.{layer}.convs.{edge_type_key(et)}"
            names = ("lin_key", "lin_query", "lin_value", "lin_skip") if conv == "transformer" else ("lin_l", "lin_r")
            for name in names:
                lin(f"{p}.{name}", hid, hid)
            lin(p + ".lin_edge", dim, hid, bias=False)
            if conv == "gatv2":
                out[p + ".att"], out[p + ".bias"] = (1, heads, hid // heads), (hid,)
        for t in ("group", "device"):
            out[f"{pre}norms.{layer}.{t}.weight"] = out[f"{pre}norms.{layer}.{t}.bias"] = (hid,)
    if structure:
        for name, n_in, n_out in (("state.0", 4 * hid + GLOBAL_DIM, hid), ("state.2", hid, hid),
                                  ("policy.0", hid + ACTION_DIM, hid), ("policy.2", hid, hid), ("policy.4", hid, 1),
                                  ("value.0", hid, hid), ("value.2", hid, 1)):
            lin(name, n_in, n_out)
    else:
        for name, n_in, n_out in (("cand.0", 2 * hid + CAND_DIM, hid), ("cand.2", hid, hid), ("cand.4", hid, 1),
                                  ("value.0", 4 * hid + GLOBAL_DIM, hid), ("value.2", hid, hid), ("value.4", hid, 1)):
            lin(name, n_in, n_out)
    return out


def check_weights(config: dict, state: dict, structure: bool = False) -> None:
    """KeyError naming a weight `expected_shapes` lists and `state` lacks, ValueError for one of another shape."""
    for name, shape in expected_shapes(config, structure).items():
        if name not in state:
            raise KeyError(f"missing weight {name}")
        if tuple(np.shape(state[name])) != shape:
            raise ValueError(f"weight {name} has shape {tuple(np.shape(state[name]))}, expected {shape}")
