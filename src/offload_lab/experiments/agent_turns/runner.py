"""Run the agent-turns experiment: the agent's regime swept over its stream counts.

Its parameters (:class:`~offload_lab.experiments.agent_turns.params.Params`) build the sweep; the sweep itself is
:mod:`offload_lab.load.sweep`, shared with ``concurrency``. This module is what the notebook calls.
"""

from __future__ import annotations

from offload_lab.load.sweep import SweepStopped, load_verdicts, run_regimes

__all__ = ["SweepStopped", "load_verdicts", "run_regimes"]
