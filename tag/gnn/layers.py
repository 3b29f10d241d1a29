"""The graph convolutions of `tag.gnn.model`, in plain torch: TransformerConv, GATv2Conv and HeteroConv.

They compute what PyTorch Geometric's classes of the same names compute for the arguments tag uses, with the same
parameter names and the same initialisation (same draws from torch's generator), so checkpoints written with PyG's
layers load unchanged (strict) and a seeded network starts from the same weights. Supported: `concat=True`, no
dropout, no `beta`, no self loops added (the graphs' edges are all there is).

Shapes: a conv maps node features x_src [N_src, F_src], x_dst [N_dst, F_dst] (or one x for both ends),
edge_index [2, E] (row 0 the source node of each edge, row 1 the destination) and edge_attr [E, edge_dim] to
[N_dst, heads * out_channels]. A destination with no incoming edge gets 0 from the messages.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tag.gnn.graph import edge_type_key
from tag.gnn.segment import scatter, softmax


class Linear(nn.Linear):
    """x W^T + b, initialised as PyG's `Linear`: W ~ U(-a, a) with a = sqrt(1 / in) ("kaiming_uniform", a = sqrt(5))
    or a = sqrt(6 / (in + out)) ("glorot"); b ~ U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, weight_init: str = "kaiming_uniform"):
        if weight_init not in ("kaiming_uniform", "glorot"):
            raise ValueError(f"weight_init must be 'kaiming_uniform' or 'glorot', got {weight_init!r}")
        self.weight_init = weight_init
        super().__init__(in_features, out_features, bias=bias)

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.weight_init == "glorot":
                _glorot_(self.weight)
            else:
                bound = math.sqrt(6 / ((1 + math.sqrt(5) ** 2) * self.in_features))
                self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                bound = 1.0 / math.sqrt(self.in_features)
                self.bias.uniform_(-bound, bound)


def _glorot_(t: torch.Tensor) -> None:
    """t ~ U(-a, a), a = sqrt(6 / (size(-2) + size(-1))), in place."""
    stdv = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    with torch.no_grad():
        t.uniform_(-stdv, stdv)


def _pair(x):
    """(x_src, x_dst) from one tensor (both ends of a homogeneous edge type) or a pair."""
    return (x, x) if isinstance(x, torch.Tensor) else x


class TransformerConv(nn.Module):
    """Graph transformer attention (Shi et al. 2021) with edge features; H = heads, C = out_channels:

        q_i = W_q x_i + b_q,  k_j = W_k x_j + b_k,  v_j = W_v x_j + b_v,  e_ij = W_e edge_attr_ij   (each [H, C])
        alpha_ij = softmax over edges j -> i of  q_i . (k_j + e_ij) / sqrt(C)                       (per head)
        out_i = concat over heads of  sum_j alpha_ij (v_j + e_ij)   (+ W_s x_i + b_s if root_weight)

    x_j are source features (x_src), x_i destination features (x_dst). Output [N_dst, H * C]. `lin_skip` (W_s,
    b_s) exists even without root_weight, as in PyG, so the parameter sets match.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, edge_dim: int | None = None,
                 root_weight: bool = True):
        super().__init__()
        self.out_channels, self.heads, self.root_weight = out_channels, heads, root_weight
        hc = heads * out_channels
        self.lin_key = Linear(in_channels, hc)
        self.lin_query = Linear(in_channels, hc)
        self.lin_value = Linear(in_channels, hc)
        self.lin_edge = Linear(edge_dim, hc, bias=False) if edge_dim is not None else None
        self.lin_skip = Linear(in_channels, hc)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_key, self.lin_query, self.lin_value, self.lin_edge, self.lin_skip):
            if lin is not None:
                lin.reset_parameters()

    def forward(self, x, edge_index: torch.Tensor, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        H, C = self.heads, self.out_channels
        x_src, x_dst = _pair(x)
        src, dst = edge_index[0], edge_index[1]
        n_dst = x_dst.shape[0]
        query = self.lin_query(x_dst).view(-1, H, C).index_select(0, dst)
        key = self.lin_key(x_src).view(-1, H, C).index_select(0, src)
        value = self.lin_value(x_src).view(-1, H, C).index_select(0, src)
        if self.lin_edge is not None:
            if edge_attr is None:
                raise ValueError("TransformerConv with edge_dim needs edge_attr")
            e = self.lin_edge(edge_attr).view(-1, H, C)
            key = key + e
            value = value + e
        alpha = softmax((query * key).sum(dim=-1) / math.sqrt(C), dst, n_dst)
        out = scatter(value * alpha.view(-1, H, 1), dst, 0, n_dst).view(-1, H * C)
        if self.root_weight:
            out = out + self.lin_skip(x_dst)
        return out


class GATv2Conv(nn.Module):
    """GATv2 attention (Brody et al. 2022) with edge features in the attention only; H = heads, C = out_channels:

        alpha_ij = softmax over edges j -> i of  a . LeakyReLU_0.2(W_r x_i + W_l x_j + W_e edge_attr_ij)  (per head)
        out_i = concat over heads of  sum_j alpha_ij (W_l x_j + b_l)   + bias

    (W_r x_i includes b_r; a = `att` [1, H, C].) Output [N_dst, H * C]. No self loops are added
    (`add_self_loops=False` is the only choice, spelled as in PyG).
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, edge_dim: int | None = None,
                 add_self_loops: bool = False, negative_slope: float = 0.2):
        super().__init__()
        if add_self_loops:
            raise ValueError("GATv2Conv here adds no self loops: pass add_self_loops=False")
        self.out_channels, self.heads, self.negative_slope = out_channels, heads, negative_slope
        hc = heads * out_channels
        self.lin_l = Linear(in_channels, hc, weight_init="glorot")
        self.lin_r = Linear(in_channels, hc, weight_init="glorot")
        self.att = nn.Parameter(torch.empty(1, heads, out_channels))
        self.lin_edge = Linear(edge_dim, hc, bias=False, weight_init="glorot") if edge_dim is not None else None
        self.bias = nn.Parameter(torch.empty(hc))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_l, self.lin_r, self.lin_edge):
            if lin is not None:
                lin.reset_parameters()
        _glorot_(self.att)
        with torch.no_grad():
            self.bias.zero_()

    def forward(self, x, edge_index: torch.Tensor, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        H, C = self.heads, self.out_channels
        x_src, x_dst = _pair(x)
        src, dst = edge_index[0], edge_index[1]
        n_dst = x_dst.shape[0]
        x_l = self.lin_l(x_src).view(-1, H, C)
        x_r = self.lin_r(x_dst).view(-1, H, C)
        x_j = x_l.index_select(0, src)
        z = x_r.index_select(0, dst) + x_j
        if self.lin_edge is not None:
            if edge_attr is None:
                raise ValueError("GATv2Conv with edge_dim needs edge_attr")
            z = z + self.lin_edge(edge_attr).view(-1, H, C)
        alpha = softmax((F.leaky_relu(z, self.negative_slope) * self.att).sum(dim=-1), dst, n_dst)
        out = scatter(x_j * alpha.unsqueeze(-1), dst, 0, n_dst).view(-1, H * C)
        return out + self.bias


class HeteroConv(nn.Module):
    """One convolution per edge type (src, rel, dst); each node type's output is the sum of the outputs of the edge
    types into it:

        out[t] = sum over edge types r = (s, rel, t) of conv_r((x[s], x[t]), edge_index[r], edge_attr[r])

    Node types no edge type points to get no entry in the output. Parameters are named `convs.<s___rel___t>.*`.
    """

    def __init__(self, convs: dict, aggr: str = "sum"):
        super().__init__()
        if aggr != "sum":
            raise ValueError(f"only aggr='sum' is implemented, got {aggr!r}")
        self.edge_types = list(convs)
        self.convs = nn.ModuleDict({edge_type_key(et): conv for et, conv in convs.items()})

    def forward(self, x_dict: dict, edge_index_dict: dict, edge_attr_dict: dict | None = None) -> dict:
        """{node type: [N_t, out]} from x_dict {node type: [N_t, F_t]}, edge_index_dict {edge type: [2, E_r]} and
        edge_attr_dict {edge type: [E_r, edge_dim_r]}; edge types missing from edge_index_dict are skipped."""
        outs: dict[str, list] = {}
        for et in self.edge_types:
            if et not in edge_index_dict:
                continue
            s, _, t = et
            x = x_dict[s] if s == t else (x_dict[s], x_dict[t])
            attr = edge_attr_dict.get(et) if edge_attr_dict is not None else None
            outs.setdefault(t, []).append(self.convs[edge_type_key(et)](x, edge_index_dict[et], attr))
        return {t: xs[0] if len(xs) == 1 else torch.stack(xs, dim=0).sum(dim=0) for t, xs in outs.items()}
