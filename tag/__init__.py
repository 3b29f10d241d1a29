"""tag: plan and run distributed DNN training on heterogeneous clusters."""

__version__ = "0.1.0"
