"""Experiment ``quality``: whether offloading changes the answers (the study's E10): each side (server) answers the
same benchmark items, is scored, and the two are compared item by item.

Writes: per side ``items.jsonl``, ``scores.csv``, ``summary.csv``, ``ifeval_instructions.csv``, ``scoring.json``,
``canaries.json``; the comparison's ``comparison.csv``/``.json``, ``paired_items.csv``, ``agreement.csv``,
``agreement_items.csv`` and ``quality.json``.
Claims: ``quality.*`` (``claims.py``, ``claims_verdicts.py``); figures ``quality_delta`` and ``quality_flips``.
"""
