"""Experiment ``concurrency``: tokens per second per stream as streams are added, for every regime of the campaign
(the study's E6/E13).

Measures: each regime (short prompts, cold prefill, shared prefix, private context, ...) swept over the same stream
counts, closed-loop (:mod:`offload_lab.load.sweep`), against the bar of 40 tokens/s per stream.
Writes: per regime ``<regime>/events.jsonl``, ``levels.csv``, ``sweep.json``; ``regimes.csv`` and ``verdicts.json``.
Claims: ``concurrency.*`` (``claims.py``: the bar, how far each regime held it, the p5); figure ``concurrency_tok_s``.
"""
