"""The structure network: priors over the structure tree's actions and a value of a node's strategy.

Encoder: the per-group network's (`TagGNN.embed`: heterogeneous graph attention over op groups and devices, with
the strategy's row maps on the edges), read out as

    s = MLP([mean_g h_g, max_g h_g, mean_d h_d, max_d h_d, u])          [hidden]

where `u` [GLOBAL_DIM] carries the state summaries and the critical-path estimate of the strategy's task graph.

Policy: every action a of the decision point, with features x_a [ACTION_DIM] (`structure_features`), scores
logit_a = MLP([s, x_a]); a softmax over the point's actions is the prior.

Value: MLP(s) + v_prior, v_prior = ln(time_scale_ms / critical-path estimate) (as `TagGNN`'s "value_prior"; the
last layer starts at zero, so an untrained head predicts the estimate): the predicted ln(time_scale_ms /
iteration_ms) of the best plan the tree finds below the node (its target in `structure_selfplay`).
"""

from __future__ import annotations

import torch
from torch import nn
from tag.gnn.data import GLOBAL_DIM
from tag.gnn.graph import to_torch
from tag.gnn.model import TagGNN, _batch_vec, pool_state
from tag.gnn.segment import softmax
from tag.gnn.structure_features import ACT, ACTION_DIM  # noqa: F401 (ACT re-exported)


class StructureNet(nn.Module):
    """`forward(data)` -> (action logits [A], values [B]) over a batch of decision points."""

    def __init__(self, hidden: int = 64, layers: int = 3, heads: int = 4):
        super().__init__()
        self.config = {"hidden": hidden, "layers": layers, "heads": heads}
        self.gnn = TagGNN(hidden=hidden, layers=layers, heads=heads)  # its encoder; its heads stay unused
        self.state = nn.Sequential(nn.Linear(4 * hidden + GLOBAL_DIM, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                   nn.ReLU())
        self.policy = nn.Sequential(nn.Linear(hidden + ACTION_DIM, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                    nn.ReLU(), nn.Linear(hidden, 1))
        self.value = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.value[-1].weight)
        nn.init.zeros_(self.value[-1].bias)

    def encoder_state_dict(self) -> dict:
        """The encoder's weights (enc, convs, norms), as `TagGNN.state_dict` keys."""
        return {k: v for k, v in self.gnn.state_dict().items() if k.split(".")[0] in ("enc", "convs", "norms")}

    def state_embedding(self, data) -> torch.Tensor:
        """s per decision point of the batch, [B, hidden]."""
        pooled = pool_state(data, self.gnn.embed(data))
        return self.state(pooled)

    def forward(self, data):
        data = to_torch(data)  # graphs come as numpy arrays from tag.gnn.data
        x = data[ACT].x
        return self.heads(self.state_embedding(data), x, _batch_vec(data[ACT], x.shape[0]), data.v_prior.reshape(-1))

    def heads(self, s: torch.Tensor, x: torch.Tensor, ab: torch.Tensor, v_prior: torch.Tensor):
        """(action logits [A], values [B]) from the state embeddings s [B, hidden], the action features x
        [A, ACTION_DIM], each action's decision point ab [A] and the value priors [B] (`forward` past the encoder:
        a caller holding a point's s scores other actions of the same state without encoding it again)."""
        logits = self.policy(torch.cat([s[ab], x], dim=1)).squeeze(-1)
        value = self.value(s).squeeze(-1) + v_prior
        return logits, value


def action_log_probs(data, logits: torch.Tensor) -> torch.Tensor:
    """Log-softmax of action logits within each decision point of a batch, [A]."""
    return log_softmax_by(logits, _batch_vec(data[ACT], logits.shape[0]))


def log_softmax_by(logits: torch.Tensor, ab: torch.Tensor) -> torch.Tensor:
    """Log-softmax of action logits [A] within each decision point ab [A] (`action_log_probs`)."""
    return torch.log(softmax(logits, ab) + 1e-12)
