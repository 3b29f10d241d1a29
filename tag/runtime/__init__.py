"""tag's Python API: run a plan inside your own torchrun worker.

Inside each rank (``torchrun --nproc-per-node N train.py``)::

    import tag.runtime as tr

    plan = tr.load_plan("plan.json", "model.onnx")           # checks the plan, joins the process group
    # 1. your own nn.Module (data-parallel-family plans, uneven rows included)
    trainer = tr.ModuleTrainer(plan, module, torch.optim.Adam(module.parameters(), 1e-3), loss="cross_entropy")
    for idx in plan.sampler(len(dataset), seed=0, epochs=10):  # this rank's rows of every global batch
        x, y = collate([dataset[i] for i in idx])
        loss = trainer.step(x, y)                              # the global-batch loss, equal on every rank
    # 2. or the ONNX model itself, any plan (placement, hybrids, SFB), weights from the file or a state_dict
    result = tr.train_onnx(plan, dataset, loss="cross_entropy", epochs=10, lr=1e-2, weights=None)

Both train exactly like one device on the whole global batch (the plan's sum of rows). The data order is
`tag.deploy.sampler`'s: a seeded permutation per epoch, the last partial batch dropped.
"""

from __future__ import annotations

from tag.deploy.checkpoint import load_weights
from tag.deploy.loss import LOSS_NAMES, Loss
from tag.deploy.sampler import EpochOrder, RankBatchSampler
from tag.runtime.layers import GlobalBatchNorm, GlobalDropout, prepare_module
from tag.runtime.module import ModuleTrainer, match_parameters
from tag.runtime.plan import RankPlan, load_plan

__all__ = ["load_plan", "RankPlan", "ModuleTrainer", "match_parameters", "train_onnx", "EpochOrder",
           "RankBatchSampler", "Loss", "LOSS_NAMES", "load_weights", "prepare_module", "GlobalBatchNorm",
           "GlobalDropout"]


def train_onnx(plan: RankPlan, dataset, loss: str = "mse", *, steps: int | None = None, epochs: int | None = None,
               lr: float | None = None, optimizer: str | None = None, seed: int = 0, weights: dict | None = None):
    """Train the plan's ONNX model on `dataset` (map-style, items (inputs, target), or a pair (X, y)) on this rank.

    weights: a state_dict by the model's parameter names to start from (default: the file's initializers).
    Returns `tag.deploy.train.RankResult` (global loss per step, per-epoch records, this rank's trained
    parameters). InputError for a dataset that does not fit the model or the loss.
    """
    import onnx
    import torch

    from tag.deploy.dataset import ArrayDataset, check_dataset, data_shapes, resolve_loss
    from tag.deploy.onnx_torch import TorchProgram
    from tag.deploy.train import DataSource, train_rank

    job = plan.job
    if isinstance(dataset, tuple) and len(dataset) == 2:
        dataset = ArrayDataset(*dataset)
    the_loss = resolve_loss(loss)
    shapes = data_shapes(job.graph, job.model_path)
    check_dataset(dataset, shapes, the_loss, plan.batch_rows, "dataset")
    source = DataSource("dataset", shapes, EpochOrder(len(dataset), plan.batch_rows, seed), dataset)
    total = steps if steps is not None else (epochs or 1) * source.order.steps_per_epoch
    program = TorchProgram(onnx.load(job.model_path), job.graph, seed=seed).to(plan.device)
    if weights is not None:
        with torch.no_grad():
            for name in program.param_names:
                if name not in weights:
                    from tag.errors import InputError

                    raise InputError("weights", f"'{name}'", "a value for every parameter of the model", "none")
                program.param(name).copy_(weights[name])
    return train_rank(plan.schedule, job.graph, program, plan.rank, total, seed, optimizer or job.training.optimizer,
                      job.training.lr if lr is None else lr, plan.device, loss=the_loss, data=source,
                      precision=job.training.precision)
