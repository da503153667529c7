"""A load run in the JSON that ``vllm bench serve --save-result --save-detailed`` writes, so that scripts and
dashboards made for vLLM's results read ours.

One file per (regime, level): each level of a sweep is what one ``vllm bench serve --max-concurrency N
--request-rate inf`` run measures. The field names and their arithmetic follow vLLM's ``vllm/benchmarks/serve.py``
(``calculate_metrics`` and the ``result_json`` it saves); ``docs/report.md`` has the mapping table. What differs, on
purpose, and said in the file's own fields:

* ``p95_*`` and ``p99_*`` are null where the level has fewer samples than :func:`offload_lab.core.stats.supports`
  asks (vLLM prints a p99 of three requests); ``percentiles_withheld_below`` says so.
* ``max_output_tokens_per_s`` counts the tokens each chunk carried (``usage``), not one per chunk, and
  ``max_concurrent_requests`` is the exact peak of requests in flight, not per-second buckets.
* The steady-state figures the study reads (the window where all N streams were in flight) ride along under
  ``offload_lab``, as ``--metadata`` keys would: vLLM's own ``duration`` spans the whole level, ramp and drain too.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from offload_lab.core import runs, stats

PERCENTILES = (95, 99)  # written as p95_*/p99_* (vLLM's --metric-percentiles), each where its n supports it
FILE_PATTERN = "{run_id}-{regime}-c{streams}.json"  # one per (regime, level), like vLLM's one file per run
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")


def _ms_stats(name: str, values_s: list[float]) -> dict[str, Any]:
    """mean/median/std and the supported percentiles of one metric in ms, as vLLM names them (``mean_ttft_ms``)."""
    v = np.asarray(values_s, dtype=float) * 1000
    out: dict[str, Any] = {f"mean_{name}_ms": float(v.mean()) if v.size else 0.0,
                           f"median_{name}_ms": float(np.median(v)) if v.size else 0.0,
                           f"std_{name}_ms": float(v.std()) if v.size else 0.0}
    for q in PERCENTILES:
        out[f"p{q}_{name}_ms"] = float(np.percentile(v, q)) if v.size and stats.supports(q, v.size) else None
    return out


def _peak(good: list[dict[str, Any]]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s (output tokens per whole second since the first request was sent) and
    max_concurrent_requests, the latter exact (a sweep over sends and ends): the installed vLLM counts every request
    active at any moment of a second, which made 12 of a level of 4 streams."""
    if not good:
        return 0.0, 0
    t0 = min(e["t_sent_ns"] for e in good)
    t1 = max(e.get("t_last_token_ns") or e["t_sent_ns"] for e in good)
    tokens = np.zeros(int(math.ceil((t1 - t0) / 1e9)) + 1)
    edges = []
    for e in good:
        times = e.get("token_times_ns") or []
        for t, c in zip(times, e.get("chunk_tokens") or [1] * len(times)):
            tokens[int((t - t0) / 1e9)] += c
        edges += [(e["t_sent_ns"], 1), (e.get("t_last_token_ns") or e["t_sent_ns"], -1)]
    level = peak = 0
    for _, step in sorted(edges, key=lambda x: (x[0], x[1])):  # an end before a send at the same instant
        level += step
        peak = max(peak, level)
    return float(tokens.max()), peak


def level_result(events: list[dict[str, Any]], streams: int, *, model: str | None, started_at: str | None,
                 endpoint: str | None = None, detailed: bool = True) -> dict[str, Any]:
    """One level of a sweep's event log as ``vllm bench serve``'s saved result."""
    level = next((e for e in events if e.get("kind") == "level" and e.get("level") == streams), {})
    reqs = [e for e in events if e.get("kind", "request") == "request" and e.get("level") == streams]
    good = [e for e in reqs if e.get("ok")]
    sent = [e["t_sent_ns"] for e in reqs if e.get("t_sent_ns")]
    ends = [e.get("t_end_ns") or e.get("t_last_token_ns") for e in reqs]
    ends = [t for t in ends if t]
    duration = float(level.get("seconds") or ((max(ends) - min(sent)) / 1e9 if sent and ends else 0.0))
    out_lens = [int(e.get("output_tokens") or e.get("completion_tokens") or 0) if e.get("ok") else 0 for e in reqs]
    total_in = sum(int(e.get("prompt_tokens") or 0) for e in good)
    total_out = sum(out_lens)
    ttfts = [e["t_first_token_ns"] - e["t_sent_ns"] for e in good]
    latencies = [(e.get("t_last_token_ns") or e["t_end_ns"]) - e["t_sent_ns"] for e in good]
    ttfts_s = [t / 1e9 for t in ttfts]
    lat_s = [t / 1e9 for t in latencies]
    # vLLM's TPOT: (latency - TTFT) / (output tokens - 1), requests of one token left out.
    good_out = [int(e.get("output_tokens") or e.get("completion_tokens") or 0) for e in good]
    tpots = [(lat - ttft) / (n - 1) for lat, ttft, n in zip(lat_s, ttfts_s, good_out) if n > 1]
    itls = [[(b - a) / 1e9 for a, b in zip(t, t[1:])] for t in (e.get("token_times_ns") or [] for e in good)]
    peak_tok, peak_req = _peak(good)
    endpoint = endpoint or next((e.get("endpoint") for e in reqs if e.get("endpoint")), None)
    backend = "openai-chat" if endpoint and "chat" in endpoint else "openai"
    when = datetime.fromisoformat(started_at.replace("Z", "+00:00")) if started_at else datetime.now()
    window = level.get("window_ns")
    result: dict[str, Any] = {
        "date": when.strftime("%Y%m%d-%H%M%S"), "endpoint_type": backend, "backend": backend, "label": None,
        "model_id": model, "tokenizer_id": model, "num_prompts": len(reqs),
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": streams,
        "duration": duration, "completed": len(good), "failed": len(reqs) - len(good),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": len(good) / duration if duration else 0.0, "request_goodput": None,
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration else 0.0,
        "max_output_tokens_per_s": peak_tok, "max_concurrent_requests": peak_req,
        **_ms_stats("ttft", ttfts_s), **_ms_stats("tpot", tpots),
        **_ms_stats("itl", [x for gaps in itls for x in gaps]), **_ms_stats("e2el", lat_s),
        "percentiles_withheld_below": {f"p{q}": stats.MIN_SAMPLES[q] for q in PERCENTILES},
    }
    if detailed:
        t0 = min(sent) if sent else 0
        result.update({
            "input_lens": [int(e.get("prompt_tokens") or 0) for e in reqs], "output_lens": out_lens,
            "ttfts": [((e["t_first_token_ns"] - e["t_sent_ns"]) / 1e9) if e.get("ok") else 0.0 for e in reqs],
            "itls": [[(b - a) / 1e9 for a, b in zip(t, t[1:])] if e.get("ok") else []
                     for e, t in ((e, e.get("token_times_ns") or []) for e in reqs)],
            "latencies": [((e.get("t_last_token_ns") or e["t_end_ns"]) - e["t_sent_ns"]) / 1e9 if e.get("ok") else 0.0
                          for e in reqs],
            "start_times": [(e["t_sent_ns"] - t0) / 1e9 for e in reqs],
            "errors": [e.get("error") or "" for e in reqs],
        })
    if window:
        from offload_lab.load.sweep import level_throughput

        result["offload_lab"] = {"steady_state": level_throughput(reqs, window),
                                 "achieved_concurrency": level.get("achieved_concurrency")}
    return result


def run_results(run_dir: Path | str, detailed: bool = True) -> dict[str, dict[str, Any]]:
    """Every (regime, level) of a load run as vLLM's saved result, by file name (:data:`FILE_PATTERN`): the run's
    ``*/events.jsonl`` (a sweep of regimes) or its ``events.jsonl``."""
    from offload_lab.load.sweep import EVENTS

    run_dir = Path(run_dir)
    manifest = runs.load_manifest(run_dir)
    model = manifest.get("server_model") or (manifest.get("server") or {}).get("model")
    run_id = manifest.get("run_id", run_dir.name)
    out = {}
    logs = sorted(run_dir.glob(f"*/{EVENTS}")) or ([run_dir / EVENTS] if (run_dir / EVENTS).is_file() else [])
    for log in logs:
        events = runs.read_events(log)
        regime = log.parent.name if log.parent != run_dir else manifest.get("experiment", "load")
        for streams in sorted({e["level"] for e in events if e.get("kind") == "level"}):
            result = level_result(events, streams, model=model, started_at=manifest.get("started_at"),
                                  detailed=detailed)
            result["offload_lab"] = {**result.get("offload_lab", {}), "run_id": run_id, "regime": regime,
                                     "experiment": manifest.get("experiment")}
            out[FILE_PATTERN.format(run_id=run_id, regime=regime, streams=streams)] = result
    return out
