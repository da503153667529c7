"""The topology section: what the boots' manifests say about the machine (GPUs, their links, machines used), and the
context summary compared between machines.

Measures nothing and has no notebook: its claims (``topology.*``, ``claims.py``) read the ``boots`` runs
(:mod:`offload_lab.server.boots`) and the ``context`` summaries (:mod:`offload_lab.load.context_summary`).
"""
