"""The capacity experiment's parameters: the notebook's parameters cell is generated from this model."""

from offload_lab.experiments.capacity.runner import CapacityParams as Params

__all__ = ["Params"]
