"""Batch statistics of training-mode BatchNormalization split by rows: the small all-reduces deploy runs.

A training-mode BatchNormalization (``training_mode=1``) of a group whose rows are split over n > 1 replicas
normalises with the statistics of the global batch: deploy sums them over the replicas (`tag.deploy.batch_stats`,
SyncBatchNorm semantics, `tag.deploy.onnx_torch.ops_nn`), in two passes: the per-channel sums and the row count,
(C + 1) floats, then the per-channel squared deviations, C floats. Their backward is the same two all-reduces in
reverse order (C, then C + 1 floats). Every replica blocks in each of them.

The simulator charges them per group and pass as one sync unit over the group's replicas: ring all-reduces of
4 (C + 1) and 4 C bytes per BatchNormalization op (fp32), one after another (op order forward, reversed
backward), ready when the group's forward (backward) has ended on every replica; it holds back each replica's next
task in program order. Placing the exchange at the end of the group's pass (rather than at the op inside it) keeps
the group one task; the wait for the slowest replica and the all-reduce latencies are what it costs.

Example: a group with one training-mode BatchNormalization of 64 channels on 2 replicas syncs 260 and 256 bytes
after its forward and 256 and 260 bytes after its backward.
"""

from __future__ import annotations

from tag.cost.optimizer import FP32_BYTES
from tag.graph.op_families import is_training_batchnorm


def training_bn_channels(gg, g: int) -> list[int]:
    """Channel count C of each training-mode BatchNormalization op of group g, in op order (C from the scale
    input's element count)."""
    ops, tensors = gg.graph.ops, gg.graph.tensors
    out = []
    for i in gg.groups[g].op_ids:
        op = ops[i]
        if is_training_batchnorm(op):
            t = tensors.get(op.inputs[1]) if len(op.inputs) > 1 else None
            out.append(int(t.numel) if t is not None and t.numel else 0)
    return out


def stat_allreduce_bytes(channels: list[int], backward: bool) -> list[float]:
    """Bytes of each all-reduce, in the order they run, for BatchNormalization ops of these channel counts.

    >>> stat_allreduce_bytes([64], False), stat_allreduce_bytes([64], True)
    ([260.0, 256.0], [256.0, 260.0])
    """
    fwd = [float(FP32_BYTES * n) for c in channels for n in (c + 1, c)]
    return fwd[::-1] if backward else fwd


def batch_stat_units(ctx, decisions, fwd_id, bwd_id) -> list[tuple[int, str, tuple[int, ...], dict, list, float]]:
    """The batch-statistics syncs of an iteration: (group, "fwd" | "bwd", replicas, {device: task} it waits for,
    phases, bytes summed) for every replicated group with training-mode BatchNormalization and each of its passes.

    fwd_id / bwd_id: per group, a list of {device: task id} (one per micro-batch; one without pipelining)."""
    out = []
    for g, dc in enumerate(decisions):
        if not dc.replicated:
            continue
        channels = ctx.bn_channels(g)
        if not channels:
            continue
        devs = tuple(dc.devices)
        for kind, ids in (("fwd", fwd_id[g]), ("bwd", bwd_id[g])):
            sizes = stat_allreduce_bytes(channels, kind == "bwd")
            phases = [p for nbytes in sizes for p in ctx.phases("ring", devs, nbytes, None)]
            for tasks in ids:
                out.append((g, kind, devs, tasks, phases, sum(sizes)))
    return out
