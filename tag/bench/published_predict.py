"""Predicted training throughput of a published row: the catalog cost model, dp-even, `tag.sim.simulate`.

A row at batch B on `count` GPUs of one catalog type (one machine, NVLink rate `intra_gbps` per GPU and
direction when given) is predicted as

    samples/s = B / t_fit x 1e3,      t_fit = simulated iteration ms ignoring memory limits (`fit_iteration_ms`)

minus the optimizer update of every group when the row timed forward and backward only (single GPU only).
Graphs: the datasets graphs shipped in the package (ResNet-50 v1.5, Inception-v3, BERT-large at sequence 128),
the ONNX light zoo's ResNet-50 v1 (inside the onnx package), and the datasets zoo builders' BERT-large at
sequence 384 / 512, ResNet-152 v1.5 and VGG-16 exported into the package data.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from tag.bench.data import published_graph
from tag.errors import InputError

# Optimizer the published runs used: momentum SGD for the CNNs, Adam / LAMB (Adam's state) for BERT.
FAMILY_OPTIMIZER = {"resnet50": "momentum", "bert_large": "adam", "inception_v3": "momentum",
                    "resnet152": "momentum", "vgg16": "momentum"}
# Model keys served by a datasets graph under another name.
DATASETS_GRAPH = {"resnet50_v15": "resnet50", "inception_v3": "inception_v3", "bert_large_s128": "bert_large"}


def _light_zoo(name: str) -> Path:
    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    if not path.exists():
        raise InputError(str(path), "light zoo", "the onnx package's backend test data (light models)",
                         "no such file")
    return path


def model_path(key: str) -> Path:
    """The ONNX file of a model key ("resnet50_v15", "resnet50_v1", "inception_v3", "bert_large_s<seq>",
    "resnet152", "vgg16")."""
    if key == "resnet50_v1":
        return _light_zoo("resnet50")
    return published_graph(DATASETS_GRAPH.get(key, key))


@lru_cache(maxsize=None)
def group_graph(key: str, n_devices: int = 1):
    """Coarsened GroupGraph of a model key for `n_devices` devices (cached per process)."""
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    graph = load_model(os.fspath(model_path(key)), batch_size=2)
    return coarsen(graph, n_devices=n_devices)


def _cluster(device: str, count: int = 1, intra_gbps: float | None = None):
    from tag.topology.loader import parse_topology

    m = {"name": "m0", "devices": [{"type": device, "count": count}]}
    if intra_gbps:
        m["intra_bandwidth_gbps"] = intra_gbps
    return parse_topology({"version": 1, "name": f"{count}x{device}", "machines": [m]}, "<published>")


def predict_samples_per_s(key: str, family: str, device: str, batch: int, precision: str = "fp32",
                          no_update: bool = False, count: int = 1, intra_gbps: float | None = None,
                          params: dict | None = None, overlap_sync: bool = True, conv_layout: str = "nhwc") -> float:
    """Predicted samples/s of one training iteration at global batch `batch` on `count` devices of type
    `device` (dp-even), ignoring memory limits; `no_update` leaves the optimizer step out (single device).
    params: {"gpu": EfficiencyParams} to predict with other than the shipped parameters. overlap_sync=False: the
    gradient syncs start after the whole backward (frameworks that all-reduce after computing every gradient).
    precision: a `TrainingConfig.precision`; conv_layout: "nhwc" or "nchw" (`RooflineCostModel`)."""
    from tag.cost.roofline import RooflineCostModel
    from tag.search.baselines import dp_even
    from tag.sim import simulate
    from tag.strategy import TrainingConfig

    gg = group_graph(key, count)
    training = TrainingConfig(optimizer=FAMILY_OPTIMIZER[family], precision=precision)
    cluster = _cluster(device, count, intra_gbps)
    cost = RooflineCostModel(gg, training, params, conv_layout=conv_layout)
    res = simulate(gg, cluster, cost, dp_even(gg, cluster, cost, training, batch), training, overlap_sync=overlap_sync)
    ms = res.fit_iteration_ms
    if no_update:
        ms -= sum(cost.update_ms(g, cluster.devices[0].type) for g in range(gg.n_groups))
    return batch / ms * 1e3


def predict_rows(rows, params: dict | None = None) -> list[float]:
    """Predicted samples/s for each `PublishedRow`."""
    return [predict_samples_per_s(r.model_key, r.family, r.device, r.batch, r.training_precision, r.no_update,
                                  params=params, conv_layout=r.conv_layout) for r in rows]
