"""Make datasets/zoo importable as `zoo` and locate the committed model files."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATASETS = os.path.join(ROOT, "datasets")
MODELS_DIR = os.path.join(DATASETS, "models")
if DATASETS not in sys.path:
    sys.path.insert(0, DATASETS)
