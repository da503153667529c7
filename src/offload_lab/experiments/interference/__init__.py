"""Experiment ``interference``: how much other requests' prefill slows a stream that is decoding, measured with probe
requests (one of the causes of the slowdown under load the study could not separate).

Measures: per prefill length, background streams prefilling all the time while probe requests, one at a time,
measure TPOT, inter-token gaps and TTFT; P = 0 is the baseline.
Writes: ``events.jsonl`` and ``summary.csv`` (one row per level, with ``tpot_ratio`` over the baseline).
Claims: none yet; the explore notebook shows its runs.
"""
