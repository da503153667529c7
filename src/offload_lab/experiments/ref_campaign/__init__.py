"""Experiment ``ref_campaign``: the published campaign, its limits and the community's home rigs as data.

Measures nothing: derives figures from the campaign's ``published`` run (:mod:`offload_lab.published.derive`).
Writes: ``derived.json`` (every derived figure with its formula and inputs), ``comparison.csv`` and its tables.
Claims: ``ref_campaign.*`` (``claims.py``, declared from the derived figures).
"""
