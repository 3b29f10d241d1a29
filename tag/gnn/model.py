"""The network: a heterogeneous graph-attention encoder with a policy head and a value head.

Encoder. Per node type a linear embedding to `hidden`, then `layers` rounds of

    h_t <- LayerNorm(h_t + ReLU(sum over edge types r into t of Conv_r(h_src, h_t, edge_attr_r)))

Conv is `TransformerConv` with `edge_dim` (conv="transformer", the default): the edge features — bytes over
bandwidth, latency, compute time at the assigned rows — enter both the attention keys and the messages,
m_ij = W_v h_j + W_e e_ij, so a slow link changes what flows, not only how much it is weighted.
conv="gatv2" (`GATv2Conv`, edge features in the attention only) is kept for comparison.

Policy head. A candidate decision c of the current group g is embedded as the row-share weighted sum of the
embeddings of the devices it uses, concatenated with its own features (sync one-hot, replication, balanced
flag, estimated compute/sync/transfer times, memory) and g's embedding; an MLP scores it; a softmax over the
candidates of each state gives the prior. Any number of candidates.

Value head. Mean and max pooling of group and device embeddings and the state's global features `u` -> MLP ->
ln(time_scale_ms / iteration_ms) of the state's strategy (the instance's ideal compute time over the simulated
iteration time: comparable across instances; differences between two strategies of one instance are their
log speedup).
With `value_prior=True` (config key "value_prior") the head's MLP output is added to the state's `v_prior`,
ln(time_scale_ms / the critical-path estimate of the iteration, `tag.gnn.estimate`): the network learns a
correction to that estimate; its last layer starts at zero, so an untrained head predicts the estimate.
With `value_trunk=True` (checkpoint config key "value_trunk") the value head reads its own encoder of the same
shape instead of the shared one, so the value can be retrained (`tag.gnn.value_fit`) with the policy untouched.
"""

from __future__ import annotations

import torch
from torch import nn
from tag.gnn.data import CAND_DIM, DEVICE_DIM, EDGE_DIMS, GLOBAL_DIM, GROUP_DIM, USES
from tag.gnn.graph import to_torch
from tag.gnn.layers import GATv2Conv, HeteroConv, TransformerConv
from tag.gnn.segment import scatter, softmax


def _batch_vec(store, n: int) -> torch.Tensor:
    b = getattr(store, "batch", None)
    return b if b is not None else torch.zeros(n, dtype=torch.long)


def pool_state(data, h) -> torch.Tensor:
    """[mean_g h_g, max_g h_g, mean_d h_d, max_d h_d, u] per graph of the batch, [B, 4 * hidden + GLOBAL_DIM]."""
    data = to_torch(data)
    bg = _batch_vec(data["group"], h["group"].shape[0])
    bd = _batch_vec(data["device"], h["device"].shape[0])
    nb = int(bg.max()) + 1 if bg.numel() else 1
    return torch.cat([scatter(h["group"], bg, 0, dim_size=nb, reduce="mean"),
                      scatter(h["group"], bg, 0, dim_size=nb, reduce="max"),
                      scatter(h["device"], bd, 0, dim_size=nb, reduce="mean"),
                      scatter(h["device"], bd, 0, dim_size=nb, reduce="max"),
                      data.u.reshape(nb, GLOBAL_DIM)], dim=1)


class TagGNN(nn.Module):
    """Joint embedding of op groups and devices; `forward(data)` -> (candidate logits [C], values [B])."""

    def __init__(self, hidden: int = 64, layers: int = 3, heads: int = 4, conv: str = "transformer",
                 value_trunk: bool = False, value_prior: bool = False):
        super().__init__()
        if layers < 1 or hidden % heads:
            raise ValueError("need layers >= 1 and hidden divisible by heads")
        if conv not in ("transformer", "gatv2"):
            raise ValueError(f"conv must be 'transformer' or 'gatv2', got {conv!r}")
        self.config = {"hidden": hidden, "layers": layers, "heads": heads, "conv": conv}
        if value_trunk:  # only then, so older checkpoints' configs stay as they were
            self.config["value_trunk"] = True
        if value_prior:
            self.config["value_prior"] = True

        def make(dim: int):
            if conv == "gatv2":
                return GATv2Conv(hidden, hidden // heads, heads=heads, edge_dim=dim, add_self_loops=False)
            return TransformerConv(hidden, hidden // heads, heads=heads, edge_dim=dim, root_weight=False)

        def trunk():
            enc = nn.ModuleDict({"group": nn.Linear(GROUP_DIM, hidden), "device": nn.Linear(DEVICE_DIM, hidden)})
            convs, norms = nn.ModuleList(), nn.ModuleList()
            for _ in range(layers):
                convs.append(HeteroConv({et: make(dim) for et, dim in EDGE_DIMS.items()}, aggr="sum"))
                norms.append(nn.ModuleDict({"group": nn.LayerNorm(hidden), "device": nn.LayerNorm(hidden)}))
            return enc, convs, norms

        self.enc, self.convs, self.norms = trunk()
        # value_trunk: a second encoder of the same shape that only the value head reads (the policy's is untouched)
        self.vtrunk = nn.ModuleList(trunk()) if value_trunk else None
        self.cand = nn.Sequential(nn.Linear(2 * hidden + CAND_DIM, hidden), nn.ReLU(),
                                  nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.value = nn.Sequential(nn.Linear(4 * hidden + GLOBAL_DIM, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                   nn.Linear(hidden, 1))
        if value_prior:
            nn.init.zeros_(self.value[-1].weight)
            nn.init.zeros_(self.value[-1].bias)

    def embed(self, data, trunk=None) -> dict[str, torch.Tensor]:
        """Node embeddings {"group": [G, hidden], "device": [D, hidden]} (of `trunk` = (enc, convs, norms),
        default the shared one)."""
        enc, convs, norms = trunk if trunk is not None else (self.enc, self.convs, self.norms)
        data = to_torch(data)
        h = {t: enc[t](data[t].x) for t in ("group", "device")}
        eidx = {et: data[et].edge_index for et in EDGE_DIMS}
        eattr = {et: data[et].edge_attr for et in EDGE_DIMS}
        for conv, norm in zip(convs, norms):
            out = conv(h, eidx, edge_attr_dict=eattr)
            h = {t: norm[t](h[t] + torch.relu(out[t])) if t in out else h[t] for t in h}
        return h

    def value_head(self, data, h) -> torch.Tensor:
        """Predicted ln(time_scale_ms / iteration_ms) per graph in the batch, [B] (with "value_prior": the
        states' `v_prior` plus the MLP's correction)."""
        data = to_torch(data)
        pooled = pool_state(data, h)
        nb = pooled.shape[0]
        out = self.value(pooled).squeeze(-1)
        if self.config.get("value_prior"):
            out = out + data.v_prior.reshape(nb)
        return out

    def policy_logits(self, data, h) -> torch.Tensor:
        """Scores of every candidate node [C] (softmax them per state with `policy_log_probs`)."""
        data = to_torch(data)
        cx = data["cand"].x
        C = cx.shape[0]
        src, dst = data[USES].edge_index
        w = data[USES].edge_attr
        pooled = scatter(h["device"][src] * w, dst, 0, dim_size=C, reduce="sum")
        current = data["group"].x[:, 8] > 0.5  # the "is current" flag (see InstanceFeatures.state)
        cur = h["group"][current]
        cb = _batch_vec(data["cand"], C)
        return self.cand(torch.cat([cur[cb], pooled, cx], dim=1)).squeeze(-1)

    def value_parameters(self) -> list:
        """The parameters only the value output depends on (the policy logits never read them)."""
        mods = [self.value] + ([self.vtrunk] if self.vtrunk is not None else [])
        return [p for m in mods for p in m.parameters()]

    def forward(self, data, with_policy: bool = True):
        data = to_torch(data)  # graphs come as numpy arrays from tag.gnn.data
        h = self.embed(data) if with_policy or self.vtrunk is None else None
        hv = self.embed(data, tuple(self.vtrunk)) if self.vtrunk is not None else h
        value = self.value_head(data, hv)
        logits = self.policy_logits(data, h) if with_policy else None
        return logits, value


def policy_log_probs(data, logits: torch.Tensor) -> torch.Tensor:
    """Log-softmax of candidate logits within each state of a batch, [C]."""
    cb = _batch_vec(data["cand"], logits.shape[0])
    return torch.log(softmax(logits, cb) + 1e-12)
