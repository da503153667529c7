"""The repeated boots' analysis parameters: the notebook's parameters cell is generated from this model."""

from offload_lab.experiments.boot_spread.runner import SpreadParams as Params

__all__ = ["Params"]
