"""The cached-prefix experiment's files (its claims and its figure read these; the runner writes them)."""

from offload_lab.core.runs import EVENTS  # noqa: F401  (the claims and figure read it from here)

EXPERIMENT = "cached_prefix"
LEVELS = "levels.csv"
SUMMARY = "summary.json"
