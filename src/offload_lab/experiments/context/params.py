"""The context experiment's parameters: the notebook's parameters cell is generated from this model."""

from offload_lab.experiments.context.runner import ContextParams as Params

__all__ = ["Params"]
