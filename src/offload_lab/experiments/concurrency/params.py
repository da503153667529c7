"""The concurrency experiment's parameters: the notebook's parameters cell is generated from this model."""

from offload_lab.experiments.concurrency.runner import RegimeSweepParams as Params

__all__ = ["Params"]
