"""The concurrency experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from offload_lab.load.sweep import RegimeSweepParams


class Params(RegimeSweepParams):
    """Several regimes (name -> workload), each swept over the same stream counts against the same bar."""
