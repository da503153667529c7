"""Experiment ``published``: the published study's figures as data, transcribed once into a run
(:mod:`offload_lab.published.transcription`).

Measures nothing: copies ``configs/published/study.yaml`` (and its companions) and the published usage profiles
into a run whose manifest says they were transcribed, naming the source and its sha256.
Writes: ``figures.json``, one CSV per published table, ``profile-<name>.json``, ``provenance.json``.
Claims: ``pub.*`` and ``published.*`` (``claims.py``), printed where the reference campaign measured nothing; figure
``published_agent_turns``. The ``ref_*``, ``capacity`` and ``cost`` experiments read its run.
"""
