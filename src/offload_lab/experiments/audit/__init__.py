"""Experiment ``audit`` (the study's E1, and past it): will the model fit, and which experts should go to host RAM.

Measures: the memory plan of the tiny checkpoint and of synthetic ones (``offload_lab.fit``), the host/GPU traffic
a plan implies, and prediction against measurement where a run can measure it.
Writes: ``fit.csv``, ``summary.csv``, ``tiny_audit.json``, ``synthetic_audit.json``, ``prediction_vs_measured.csv``
(with its sources), ``benchmarks.csv``, ``generators.csv``, ``events.jsonl`` and the routing calibration.
Claims: ``audit.*`` and ``plan.*`` (``claims.py``); figures ``audit_fit`` and ``plan_traffic``.
"""
