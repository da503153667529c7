"""Experiment ``ref_regimes``: the published concurrency figures (E6/E13) as data, with what follows.

Measures nothing: derives figures from the campaign's ``published`` run (:mod:`offload_lab.published.derive`).
Writes: ``derived.json``, ``comparison.csv`` and its tables.
Claims: ``ref_regimes.*`` (``claims.py``).
"""
