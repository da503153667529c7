"""Experiment ``capacity``: seats and pods from the bar and a usage profile, by concurrency, volume, correlation and
simulation. No server: its inputs come from a campaign's ``published`` run or, with ``source: measured``, from its
own ``agent_turns`` (or ``concurrency``) and ``context`` runs (:mod:`offload_lab.published.study_inputs`).
Writes: ``inputs.json`` (every input and where it came from), ``profile.json``, ``seats.csv``, ``teams.csv``,
``pods_curve.csv``, ``volume.csv``, ``correlation.csv``, ``simulation.csv``, ``timings.json``.
Claims: ``capacity.*``, ``seats.*``, ``pods.*``, ``volume.*``, ``correlation.*``, ``sim.*``, ``teams.*`` and the inputs'
``study.*``/``streams.*``/``profile.*`` (``claims*.py``); figures ``seats_team_size``, ``seats_correlation`` and, for
``cost``, ``cost_team_size`` (``figures.py``).
"""
