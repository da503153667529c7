"""Experiment ``ref_topology``: the published topology comparison (E7) as data.

Measures nothing: derives figures from the campaign's ``published`` run (:mod:`offload_lab.published.derive`).
Writes: ``derived.json`` and ``comparison.csv``.
Claims: ``ref_topology.*`` (``claims.py``).
"""
