"""Experiment ``agent_turns``: agents at once against tokens per second each, the study's agent-turn sweep (E6).

Measures: ``streams`` agents, each a context that grows by ``turn_new_tokens`` a turn with replies of
``output_tokens``, run closed-loop for ``turns`` turns per level (:mod:`offload_lab.load.sweep`), against the bar.
Writes: ``agent_turns/events.jsonl``, ``levels.csv`` and ``sweep.json`` per regime, ``regimes.csv`` and
``verdicts.json`` (parameters in ``params.py``; the notebook runs ``runner.py``).
Claims: ``agent.*`` (``claims.py``: up to how many agents held the bar, the p5, the provisioning count); figure
``agent_turns_tok_s``. The ``capacity`` and ``cost`` experiments read its run with ``source: measured``.
"""
