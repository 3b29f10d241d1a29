"""Shared fixtures for the GNN tests: a small model coarsened for a small cluster, and an analytic cost model."""

from __future__ import annotations

import os

import pytest

from tag.strategy import TrainingConfig

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODELS = os.path.join(ROOT, "datasets", "models")


@pytest.fixture(scope="session")
def small_cnn_graph():
    from tag.graph import load_model
    return load_model(os.path.join(MODELS, "small_cnn.onnx"), batch_size=64)


@pytest.fixture(scope="session")
def training():
    return TrainingConfig()
