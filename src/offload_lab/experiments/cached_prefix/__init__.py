"""Experiment ``cached_prefix``: several users on one cached long prefix (the study's "4 users on one cached 256K-token
prefix": TTFT p95 1.66 s, median TPOT 16.6 ms).

Measures: one level of ``users`` closed-loop streams whose prompts share a primed prefix (:mod:`offload_lab.load.sweep`),
each request's cached tokens checked against it.
Writes (``tables.py``): ``events.jsonl``, ``levels.csv``, ``summary.json``.
Claims: ``cached_prefix.*`` (``claims.py``).
"""
