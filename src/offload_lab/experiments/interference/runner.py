"""Experiment ``interference``: how much other requests' prefill slows a stream that is decoding, measured with probe
requests (one of the causes of the slowdown under load the study could not separate).

Per level (a prefill length P, in tokens; P = 0 is the baseline with no background), ``background_streams``
closed-loop streams each send fresh prompts of exactly P tokens (as token ids, eight of them salted per request, so
the prefix cache cannot help) asking for one output token, so the engine is prefilling all the time. Meanwhile probe requests, one at a time, each a fresh
short prompt asking for ``probe_output_tokens`` tokens, measure decoding: TPOT, the inter-token gaps (ITL: median,
p95, max) and TTFT. The background starts before the first probe and stops after the last; a probe counts only if
the background was running for its whole life (``covered``). Levels run in the listed order, each after a warm-up
probe; ``repeats`` passes over the levels spread a slow drift of the machine over all of them.

``events.jsonl``: one line per probe (``kind: probe``) and per background request (``kind: background``), with the
level's ``prefill_tokens`` and ``pass``. ``summary.csv``, one row per level: prefill_tokens, probes, covered,
tpot_median_ms, tpot_p95_ms, itl_median_ms, itl_p95_ms, itl_max_ms (median over probes of each probe's max gap),
ttft_median_s, background_requests, background_prefill_tok_s (prompt tokens of finished background requests over the
level's wall time), tpot_ratio (the level's median TPOT over the baseline's).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from offload_lab.core import runs
from offload_lab.core.errors import InputError, ProducerError
from offload_lab.load import client as load
from offload_lab.load import prompts
from offload_lab.experiments.interference.params import Params as InterferenceParams
from offload_lab.load.endpoint import Endpoint
from offload_lab.core.runs import EVENTS

EXPERIMENT = "interference"
SUMMARY = "summary.csv"


def run_experiment(run: runs.Run, url: str | Endpoint, params: InterferenceParams,
                   model: str | None = None) -> pd.DataFrame:
    endpoint = Endpoint.of(url)
    model = model or endpoint.first_model()
    with endpoint.sync_client() as http:
        tok = prompts.Tokenizer(endpoint.base_url, model, http)
        limit = tok.max_model_len()
        too_long = [p for p in params.prefill_tokens if limit and p + 1 > limit]
        if too_long or (limit and params.probe_prompt_tokens + params.probe_output_tokens > limit):
            raise InputError(f"prefill lengths {too_long} or the probe do not fit the server's max_model_len {limit}")
        run.update(server_model=model, max_model_len=limit)
        # Probes and background prompts are built before the clock starts: tokenizing is not part of what is timed.
        per_level = params.probes + 1
        probe_texts = [prompts.exact_prompt(tok, params.probe_prompt_tokens, f"{run.run_id}/probe/{i}")
                       for i in range(per_level * len(params.prefill_tokens) * params.repeats)]
        base = {p: tok.tokenize(prompts.exact_prompt(tok, p, f"{run.run_id}/bg/{p}"))
                for p in params.prefill_tokens if p}
    with run.events(EVENTS) as log:
        k = 0
        for rep in range(params.repeats):
            for p in params.prefill_tokens:
                texts = probe_texts[k:k + per_level]
                k += per_level
                level = load.run_sync(_level(endpoint, model, p, base.get(p), texts, params, rep, run.run_id))
                for event in level:
                    log.append(event)
    summary = summarize(runs.read_events(run.file(EVENTS)))
    run.write_table(SUMMARY, summary)
    if (summary["covered"] == 0).any():
        bad = summary[summary["covered"] == 0]["prefill_tokens"].tolist()
        raise ProducerError(f"no probe was measured under background prefill at lengths {bad}; see {run.file(EVENTS)}")
    return summary


SALT_TOKENS = 8


def salted(ids: list[int], salt: str) -> list[int]:
    """The same prompt, as token ids, with tokens 1..8 replaced by a seeded draw from the prompt's own tokens: the
    first KV block differs, so the prefix cache cannot help, and the length stays exact. Token 0 is kept (it may be
    the tokenizer's BOS, which the server does not add to a prompt given as ids)."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(salt.encode()).digest()[:8], "big"))
    pool = np.asarray(ids[1:])
    head = [int(x) for x in rng.choice(pool, size=min(SALT_TOKENS, len(ids) - 1))]
    return ids[:1] + head + ids[1 + len(head):]


async def _level(endpoint: Endpoint, model: str, prefill: int, bg_ids: list[int] | None, probe_texts: list[str],
                 params: InterferenceParams, rep: int, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    stop = asyncio.Event()
    bg_span: dict[str, int] = {}
    async with endpoint.async_session(params.background_streams + 1) as client:
        async def background(stream: int) -> None:
            i = 0
            while not stop.is_set():
                prompt = salted(list(bg_ids or []), f"{run_id}/{rep}/{prefill}/{stream}/{i}")
                payload = load.completion_payload(model, prompt, 1)
                rec = await load.stream_request(client, endpoint, "/v1/completions", payload)
                events.append(rec.event(kind="background", prefill_tokens=prefill, stream=stream, **{"pass": rep}))
                i += 1

        async def probe(text: str) -> load.RequestRecord:
            payload = load.completion_payload(model, text, params.probe_output_tokens)
            return await load.stream_request(client, endpoint, "/v1/completions", payload,
                                             expected_tokens=params.probe_output_tokens)

        tasks = []
        if prefill:
            bg_span["start"] = time.monotonic_ns()
            tasks = [asyncio.create_task(background(s)) for s in range(params.background_streams)]
            # Let the first background prefill begin before the first probe is sent.
            await asyncio.sleep(0.05)
        await probe(probe_texts[0])  # warm-up, not recorded
        for i, text in enumerate(probe_texts[1:]):
            rec = await probe(text)
            ev = rec.event(kind="probe", prefill_tokens=prefill, probe=i, **{"pass": rep})
            ev["itl_ms_list"] = rec.itl_ms
            ev["covered"] = bool(prefill) and all(not t.done() for t in tasks)
            events.append(ev)
        stop.set()
        if tasks:
            # The span ends when the last background request does: the rate counts all their tokens.
            await asyncio.gather(*tasks)
            bg_span["end"] = time.monotonic_ns()
    for e in events:
        if e["kind"] == "background":
            e["level_start_ns"], e["level_end_ns"] = bg_span.get("start"), bg_span.get("end")
    return events


def summarize(events: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per prefill length, from the raw events (successful probes only)."""
    rows = []
    probes = [e for e in events if e.get("kind") == "probe"]
    levels = list(dict.fromkeys(e["prefill_tokens"] for e in probes))
    for p in levels:
        at = [e for e in probes if e["prefill_tokens"] == p and e.get("ok")]
        used = [e for e in at if e.get("covered") or p == 0]
        tpot = [e["tpot_ms"] for e in used if e.get("tpot_ms") is not None]
        itl = [x for e in used for x in (e.get("itl_ms_list") or [])]
        itl_max = [max(e["itl_ms_list"]) for e in used if e.get("itl_ms_list")]
        bg = [e for e in events if e.get("kind") == "background" and e["prefill_tokens"] == p and e.get("ok")]
        spans = {(e.get("pass"), e.get("level_start_ns"), e.get("level_end_ns")) for e in bg}
        wall = sum((b - a) / 1e9 for _, a, b in spans if a and b)
        rows.append({
            "prefill_tokens": p,
            "probes": len(at),
            "covered": len(used),
            "tpot_median_ms": _q(tpot, 50), "tpot_p95_ms": _q(tpot, 95),
            "itl_median_ms": _q(itl, 50), "itl_p95_ms": _q(itl, 95),
            "itl_max_ms": _q(itl_max, 50),
            "ttft_median_s": _q([e["ttft_s"] for e in used if e.get("ttft_s") is not None], 50),
            "background_requests": len(bg),
            "background_prefill_tok_s": (sum(e.get("prompt_tokens") or 0 for e in bg) / wall) if wall else None,
        })
    frame = pd.DataFrame(rows)
    base = frame.loc[frame["prefill_tokens"] == 0, "tpot_median_ms"]
    frame["tpot_ratio"] = frame["tpot_median_ms"] / float(base.iloc[0]) if len(base) and base.iloc[0] else None
    return frame


def _q(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize_run(run_dir: Path) -> pd.DataFrame:
    return summarize(runs.read_events(Path(run_dir) / EVENTS))
