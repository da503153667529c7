"""Run the concurrency experiment: every regime of the campaign swept over the same stream counts.

The sweep itself (levels, the bar's verdict, the tables) is :mod:`offload_lab.load.sweep`, shared with
``agent_turns``, ``cached_prefix`` and ``bench``; this module is what the notebook calls.
"""

from __future__ import annotations

from offload_lab.load.sweep import SweepStopped, load_verdicts, run_regimes

__all__ = ["SweepStopped", "load_verdicts", "run_regimes"]
