"""Experiment ``ref_context``: the published long-context figures (E4/E5) as data, with what follows.

Measures nothing: derives figures from the campaign's ``published`` run (:mod:`offload_lab.published.derive`).
Writes: ``derived.json``, ``comparison.csv`` and its tables.
Claims: ``ref_context.*`` (``claims.py``); figure ``ref_context_rates``.
"""
