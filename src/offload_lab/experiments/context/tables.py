"""The context experiment's files (its runner writes them; its claims, its figures and the explore notebook read
them). The summary's contract lives in :mod:`offload_lab.load.context_summary`, shared with ``topology``."""

from __future__ import annotations

from offload_lab.load.context_summary import SUMMARY, context_summary

EXPERIMENT = "context"
EVENTS = "events.jsonl"

__all__ = ["EVENTS", "EXPERIMENT", "SUMMARY", "context_summary"]
