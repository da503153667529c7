"""Experiment ``context``: decode time per output token against context length, and time to first token of a fresh
prompt (the study's E4/E5 "reading" and "writing" long contexts).

Measures: one request per context length and repeat, a fresh prompt of exactly that many tokens, ``output_tokens``
out with ``ignore_eos``.
Writes (``tables.py``): ``events.jsonl`` and ``summary.csv`` (its contract in :mod:`offload_lab.load.context_summary`).
Claims: ``context.*`` and ``prefill.*`` (``claims.py``, ``claims_prefill.py``); figures ``context_tpot``,
``context_ttft``, ``prefill_cold_cached``. ``capacity``/``cost`` (measured) read its prefill rate, ``topology`` its
summary.
"""
