"""Experiment ``ref_model``: the published model, memory audit (E1) and boots (E2) as data, with what follows.

Measures nothing: derives figures from the campaign's ``published`` run (:mod:`offload_lab.published.derive`).
Writes: ``derived.json``, ``comparison.csv`` and its tables.
Claims: ``ref_model.*`` (``claims.py``).
"""
