"""The cost experiment's parameters: the notebook's parameters cell is generated from this model."""

from offload_lab.experiments.cost.runner import CostParams as Params

__all__ = ["Params"]
