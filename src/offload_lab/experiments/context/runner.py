"""Experiment ``context``: decode time per output token against context length, and time to first token of a fresh
prompt (the study's E4/E5 "reading" and "writing" long contexts).

For every context length and repeat, one request with a fresh prompt of exactly that many tokens (salted at the
start, so the prefix cache cannot help) asks for a fixed number of output tokens with ``ignore_eos``. Its TTFT is
the cold prefill of the whole context; its TPOT is decoding with that context in the KV cache. Repeats are the
outer loop so that a slow drift of the machine spreads over all lengths instead of biasing one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pandas as pd

from offload_lab.load import client as load
from offload_lab.load import prompts
from offload_lab.core import progress, runs
from offload_lab.core import stats
from offload_lab.core.errors import InputError, ProducerError
from offload_lab.experiments.context.params import Params as ContextParams
from offload_lab.experiments.context.tables import EVENTS, EXPERIMENT, SUMMARY  # noqa: F401  (notebooks use EXPERIMENT)


def run_experiment(run: runs.Run, url: str, params: ContextParams, model: str | None = None) -> pd.DataFrame:
    """Measure every (repeat, length) pair into ``events.jsonl``, then write ``summary.csv``; return the summary."""
    model = model or load.first_model(url)
    with httpx.Client(timeout=60.0) as http:
        tok = prompts.Tokenizer(url, model, http)
        limit = tok.max_model_len()
        too_long = [n for n in params.context_lengths if limit and n + params.output_tokens > limit]
        if too_long:
            raise InputError(
                f"context lengths {too_long} plus {params.output_tokens} output tokens exceed the server's "
                f"max_model_len {limit}; shorten them or start the server with a larger --max-model-len"
            )
        run.update(server_model=model, max_model_len=limit)
        with run.events(EVENTS) as log:
            if params.warmup:
                _measure(log, tok, url, model, params.context_lengths[0], params.output_tokens,
                         salt=f"{run.run_id}/warmup", kind="warmup", repeat=-1)
            sent = progress.counting("context requests", params.repeats * len(params.context_lengths), "requests")
            for repeat in range(params.repeats):
                for n in params.context_lengths:
                    _measure(log, tok, url, model, n, params.output_tokens,
                             salt=f"{run.run_id}/{repeat}/{n}", kind="request", repeat=repeat)
                    sent.add()
    summary = summarize(runs.read_events(run.file(EVENTS)))
    run.write_table(SUMMARY, summary)
    failed = summary[summary["n"] == 0]["context_tokens"].tolist()
    if failed:
        raise ProducerError(f"every request failed at context lengths {failed}; see {run.file(EVENTS)}")
    return summary


def _measure(log: runs.EventLog, tok: prompts.Tokenizer, url: str, model: str, n_tokens: int,
             output_tokens: int, salt: str, kind: str, repeat: int) -> load.RequestRecord:
    prompt = prompts.exact_prompt(tok, n_tokens, salt)
    payload = load.completion_payload(model, prompt, output_tokens)
    rec = load.run_one(url, "/v1/completions", payload, expected_tokens=output_tokens)
    mismatch = rec.prompt_tokens is not None and rec.prompt_tokens != n_tokens
    log.append(rec.event(kind=kind, context_tokens=n_tokens, repeat=repeat, prompt_length_mismatch=mismatch))
    return rec


def summarize(events: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per context length, from the raw events (successful requests only; failures counted apart)."""
    rows = []
    requests = [e for e in events if e.get("kind") == "request"]
    for n in sorted({e["context_tokens"] for e in requests}):
        at = [e for e in requests if e["context_tokens"] == n]
        good = [e for e in at if e.get("ok") and not e.get("prompt_length_mismatch")]
        ttft = stats.summarize([e["ttft_s"] for e in good])
        tpot = stats.summarize([e["tpot_ms"] for e in good])
        toks = stats.summarize([e["tok_s"] for e in good])
        rows.append({
            "context_tokens": n,
            "n": len(good),
            "errors": len(at) - len(good),
            "ttft_median_s": ttft["median"], "ttft_p5_s": ttft["p5"], "ttft_p95_s": ttft["p95"],
            "tpot_median_ms": tpot["median"], "tpot_p5_ms": tpot["p5"], "tpot_p95_ms": tpot["p95"],
            "tok_s_median": toks["median"],
            "cached_tokens_max": max((e.get("cached_tokens") or 0 for e in good), default=None),
        })
    return pd.DataFrame(rows)


def summarize_run(run_dir: Path) -> pd.DataFrame:
    """Recompute a run's summary from its raw events (the summary file is derived, the events are the record)."""
    return summarize(runs.read_events(Path(run_dir) / EVENTS))
