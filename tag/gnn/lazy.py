"""Structure priors that load their network on first use, so a plan whose structure tree never runs (`--playouts
0`, `--baseline`) never imports torch for it. No heavy import here (the shipped checkpoints' paths:
`tag.gnn.shipped`)."""

from __future__ import annotations


def lazy_structure_priors_fn(ckpt_path: str, gg, cluster, cost, training, batch: int | None = None):
    """A StructurePriorsFn that builds `structure_priors.load_structure_priors_fn(ckpt_path, ...)` on its first
    call and delegates to it (the checkpoint is read then: a bad one raises InputError there)."""
    loaded: list = []

    def priors_fn(strategy, level, names):
        if not loaded:
            from tag.gnn.structure_priors import load_structure_priors_fn
            loaded.append(load_structure_priors_fn(ckpt_path, gg, cluster, cost, training, batch))
        return loaded[0](strategy, level, names)

    return priors_fn
