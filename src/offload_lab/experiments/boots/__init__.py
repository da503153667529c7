"""Experiment ``boots``: every server start of the campaign, ready or not, and the model the server loaded.

Measures nothing itself: the server layer records each boot as a run (``boot.json`` with its outcome, start-up
time, probe, packages; :mod:`offload_lab.server.boots`), and this folder holds the claims and prose that read them.
Claims: ``boots.*``, ``model.*`` (``claims.py``); the ``topology`` claims read the same runs.
"""
