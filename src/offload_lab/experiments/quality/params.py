"""The quality experiment's parameters: the notebook's parameters cell is generated from this model."""

from offload_lab.experiments.quality.runner import QualityParams as Params

__all__ = ["Params"]
