"""The context experiment's files (its runner writes them; its claims, its figures and the explore notebook read
them). The summary's contract lives in :mod:`offload_lab.load.context_summary`, shared with ``topology``."""

from __future__ import annotations

from offload_lab.load.context_summary import SUMMARY, context_summary
from offload_lab.core.runs import EVENTS

EXPERIMENT = "context"
__all__ = ["EVENTS", "EXPERIMENT", "SUMMARY", "context_summary"]
