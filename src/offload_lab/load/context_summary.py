"""The summary a context sweep writes (time to first token and per output token, by context length), and how it is
read: by the ``context`` experiment's claims and figures, and by other experiments' claims that compare machines on
it (``topology``), which is why it lives below the experiments."""

from __future__ import annotations

from typing import Any

SUMMARY = "summary.csv"

SUMMARY_COLUMNS = (
    "context_tokens",
    "n",
    "ttft_median_s",
    "ttft_p5_s",
    "ttft_p95_s",
    "tpot_median_ms",
    "tpot_p5_ms",
    "tpot_p95_ms",
    "tok_s_median",
)


def context_summary(src: Any, name: str = SUMMARY) -> Any:
    """The context summary of a run source (anything with ``csv(name)``), checked against the data contract and
    sorted by context length."""
    frame = src.csv(name)
    missing = [c for c in SUMMARY_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} lacks columns {missing}")
    # A length at which every request failed has no statistics; the failures are counted from the events instead.
    frame = frame[frame["n"] > 0]
    if frame.empty:
        raise ValueError(f"{name} has no row with a successful request")
    return frame.sort_values("context_tokens").reset_index(drop=True)
