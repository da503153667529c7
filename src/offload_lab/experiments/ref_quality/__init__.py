"""Experiment ``ref_quality``: the published quality comparison (E10) as data, with intervals computed from counts.

Measures nothing: derives figures from the campaign's ``published`` run (:mod:`offload_lab.published.derive`).
Writes: ``derived.json``, ``comparison.csv`` and its tables.
Claims: ``ref_quality.*`` (``claims.py``); figure ``ref_quality_intervals``.
"""
