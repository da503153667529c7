"""The audit experiment's parameters: the notebook's parameters cell is generated from this model."""

from offload_lab.experiments.audit.runner import AuditParams as Params

__all__ = ["Params"]
