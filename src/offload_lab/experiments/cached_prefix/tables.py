"""The cached-prefix experiment's files (its claims and its figure read these; the runner writes them)."""

EXPERIMENT = "cached_prefix"
EVENTS = "events.jsonl"
LEVELS = "levels.csv"
SUMMARY = "summary.json"
