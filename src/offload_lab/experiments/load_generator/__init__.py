"""Experiment ``load_generator``: the four-tool load-generator comparison (``offload-lab compare``), copied into
the campaign so the paper can cite it.

Measures nothing: for each stream level of its parameters it copies, byte for byte, the newest ``ok`` run of
``data/bench/compare/`` at that level (its ``comparison.json`` and ``windows.csv``), and records each source path,
run id and sha256 in ``sources.json``. Needs no server.
Writes: ``comparison-low.json``, ``windows-low.csv``, ``comparison-high.json``, ``windows-high.csv``,
``sources.json``. Claims: ``load_generator.*`` (``claims.py``), printed in an appendix (``section.qmd``).
"""
