"""The agent-turn sweep in the explore notebook (``offload_lab.paper.explore`` finds this module at run time): the
sweep's shared view, ``offload_lab.paper.explore_sweep``."""

from __future__ import annotations

from offload_lab.paper.explore_sweep import COMPARE, TABLES, plot

__all__ = ["COMPARE", "TABLES", "plot"]
