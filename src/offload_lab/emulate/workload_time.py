"""A pod model's seconds for the requests a workload sends: what an experiment folder's ``rehearsal`` module adds up
to say how long its parameters keep the real pod busy (:mod:`offload_lab.campaigns.rehearse_cost`).

Closed-loop streams of a level run side by side, so a level lasts as long as one stream's requests; primed caches are
filled one request at a time, the way :mod:`offload_lab.load.workloads` primes them.
"""

from __future__ import annotations

from typing import Any, Protocol


class PaceModel(Protocol):
    """What a pod model answers: the time to first token and the time per output token."""

    def ttft_s(self, new_tokens: int, cached_tokens: int = 0) -> float: ...

    def tpot_ms(self, streams: int, context_tokens: int) -> float: ...


def reply_seconds(m: PaceModel, prompt_tokens: int, output_tokens: int, streams: int = 1, cached: int = 0) -> float:
    """One request: its TTFT, then (reply - 1) tokens at the level's TPOT."""
    return m.ttft_s(prompt_tokens, cached) + (output_tokens - 1) * m.tpot_ms(streams, cached + prompt_tokens) / 1e3


def regime_request(m: PaceModel, w: dict[str, Any], streams: int) -> tuple[float, float]:
    """(priming seconds at this level, seconds of one request of one stream) for a regime's workload fields."""
    regime, out = w.get("regime"), int(w.get("output_tokens", 64))
    if regime in ("short", "cold_prefill"):
        return 0.0, reply_seconds(m, int(w.get("prompt_tokens", 128)), out, streams)
    prefix, suffix = int(w.get("prefix_tokens", 2048)), int(w.get("suffix_tokens", 32))
    per = reply_seconds(m, suffix, out, streams, cached=prefix)
    contexts = 1 if regime == "shared_prefix" else streams
    return contexts * (m.ttft_s(prefix) + m.ttft_s(1, prefix)), per
