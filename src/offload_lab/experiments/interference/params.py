"""The interference experiment's parameters: the notebook's parameters cell is generated from this model."""

from offload_lab.experiments.interference.runner import InterferenceParams as Params

__all__ = ["Params"]
