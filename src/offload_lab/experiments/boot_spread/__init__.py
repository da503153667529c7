"""Experiment ``boot_spread``: the spread between boots beside the spread within a boot.

Measures: the same short sweep after each of several server boots, so that a difference between boots can be told
from the noise inside one.
Writes: ``events.jsonl``, ``per_boot.csv``, ``boot_spread.csv`` and the boots' ``ledger.jsonl``.
Claims: ``spread.*`` (``claims.py``); figure ``boot_spread``.
"""
