"""Experiment ``cached_prefix``: several users on one cached long prefix (the study's "4 users on one cached 256K-token
prefix": TTFT p95 1.66 s, median TPOT 16.6 ms)."""
