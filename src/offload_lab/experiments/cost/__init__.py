"""Experiment ``cost``: a pod's month against subscriptions, for teams of every size. No server: the inputs are
those of ``capacity`` (:mod:`offload_lab.published.study_inputs`) plus the stack file's price and the campaign file's
seat price.
Writes: ``inputs.json``, ``cost.json``, ``costed_teams.csv``, ``teams.csv``, ``sensitivity.csv``.
Claims: ``cost.*`` and ``sensitivity.*`` (declared with the ``capacity`` claims, one section); figure
``cost_team_size`` (in ``capacity/figures.py``).
"""
