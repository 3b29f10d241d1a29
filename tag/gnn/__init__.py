"""The GNN that guides the search: features (`data`), network (`model`), checkpoints, priors, training.

Public API: `load_priors_fn(ckpt_path, gg, cluster, cost, training) -> priors_fn` for
`tag.search.planner.plan(..., priors_fn=...)`, and `default_checkpoint()` -> the shipped weights' path or None;
`load_structure_priors_fn(ckpt_path, gg, cluster, cost, training)` -> the structure tree's priors for
`plan(..., structure_priors_fn=...)` (`tag.gnn.structure_model`; shipped weights: `checkpoint.default_structure_checkpoint()`).
Heavy imports (torch) happen on first use, and planning makes none: `load_priors_fn` and `load_structure_priors_fn`
evaluate the networks in numpy (`tag.gnn.infer`, weights read by `tag.gnn.pt_reader`). Nothing here imports
torch_geometric (`tag.gnn.layers` and `tag.gnn.graph` implement what the networks use).
"""

from __future__ import annotations

__all__ = ["load_priors_fn", "load_structure_priors_fn", "default_checkpoint", "FEATURE_VERSION"]


def __getattr__(name):
    if name == "load_priors_fn":
        from tag.gnn.priors import load_priors_fn
        return load_priors_fn
    if name == "load_structure_priors_fn":
        from tag.gnn.structure_priors import load_structure_priors_fn
        return load_structure_priors_fn
    if name == "default_checkpoint":
        from tag.gnn.checkpoint import default_checkpoint
        return default_checkpoint
    if name == "FEATURE_VERSION":
        from tag.gnn.data import FEATURE_VERSION
        return FEATURE_VERSION
    raise AttributeError(f"module 'tag.gnn' has no attribute {name!r}")
