"""Proof that the load generator's clock is right: measure a token source whose timing is known.

The calibrated source (:mod:`offload_lab.load.tokensource`) runs in its own process and streams at a set rate per stream.
The load generator measures it through the same closed-loop code path as a real server, at several stream counts.
Reported per level: the measured median per-stream rate and TPOT against the set values (relative error), and the
per-token timing error, arrival stamp minus the source's send stamp (same monotonic clock), at p50, p99 and max.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import httpx
import numpy as np
import pandas as pd

from offload_lab.load import closed_loop
from offload_lab.load import client as load
from offload_lab.core import runs
from offload_lab.core import procs
from offload_lab.core.errors import ServerError
from offload_lab.load.workloads import PreparedWorkload, RequestSpec, WorkloadSpec

EXPERIMENT = "clock_check"
EVENTS = "events.jsonl"
SUMMARY = "summary.csv"


def start_source(rate_tok_s: float, ttft_ms: float, cpus: list[int] | None = None) -> tuple[subprocess.Popen, str]:
    port = procs.free_port()
    cmd = [sys.executable, "-m", "offload_lab.load.tokensource", "--port", str(port), "--rate", str(rate_tok_s),
           "--ttft-ms", str(ttft_ms)]
    preexec = (lambda: os.sched_setaffinity(0, set(cpus))) if cpus else None
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=preexec)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServerError(f"the token source exited: {proc.stderr.read().decode(errors='replace')[-500:]}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                time.sleep(0.1)
        raise ServerError("the token source did not answer within 30 s")
    except BaseException:
        procs.terminate_group(proc, 5)
        raise


def _work(streams: int, requests_per_stream: int, tokens: int) -> PreparedWorkload:
    spec = WorkloadSpec(regime="short", output_tokens=tokens, block_size=16)
    work = PreparedWorkload(spec=spec, model="token-source", streams=streams, requests_per_stream=requests_per_stream)
    work.queues = [[RequestSpec("/v1/completions", load.completion_payload("token-source", "x", tokens), tokens)
                    for _ in range(requests_per_stream)] for _ in range(streams)]
    return work


def run_clock_check(run: runs.Run, streams: list[int], rate_tok_s: float = 50.0, ttft_ms: float = 50.0,
                    tokens: int = 64, requests_per_stream: int = 3, source_cpus: list[int] | None = None,
                    progress: Any = print) -> pd.DataFrame:
    proc, url = start_source(rate_tok_s, ttft_ms, source_cpus)
    try:
        with run.events(EVENTS) as log:
            for n in streams:
                stop = closed_loop.StopState(closed_loop.StopRule())
                result = load.run_sync(closed_loop.run_level(url, _work(n, requests_per_stream, tokens), stop, log,
                                                             scrape_interval_s=3600))
                log.append({"kind": "level", "level": n, "window_ns": result.window_ns, **result.lag})
                if progress:
                    progress(f"clock check: {n} stream(s) done")
    finally:
        procs.terminate_group(proc, 5)
    summary = summarize(runs.read_events(run.file(EVENTS)), rate_tok_s)
    run.write_table(SUMMARY, summary)
    return summary


def summarize(events: list[dict[str, Any]], rate_tok_s: float) -> pd.DataFrame:
    set_tpot_ms = 1000.0 / rate_tok_s
    rows = []
    for lv in (e for e in events if e.get("kind") == "level"):
        n = lv["level"]
        start, end = lv["window_ns"] or (0, 0)
        reqs = [e for e in events if e.get("kind") == "request" and e.get("level") == n and e.get("ok")
                and e["t_first_token_ns"] >= start and e["t_last_token_ns"] <= end]
        errors_ms = np.asarray([(a - s) / 1e6 for e in reqs
                                for a, s in zip(e["token_times_ns"], e["server_sent_ns"])]) if reqs else np.zeros(0)
        tok_s = float(np.median([e["tok_s"] for e in reqs])) if reqs else float("nan")
        tpot = float(np.median([e["tpot_ms"] for e in reqs])) if reqs else float("nan")
        # The source sends n tokens over (n-1) intervals, so its per-stream rate as defined here is
        # n / ((n-1) * interval); compare like with like.
        n_tok = reqs[0]["output_tokens"] if reqs else 0
        set_tok_s = rate_tok_s * n_tok / (n_tok - 1) if n_tok > 1 else rate_tok_s
        rows.append({
            "streams": n, "requests": len(reqs), "set_tok_s": set_tok_s, "tok_s_median": tok_s,
            "tok_s_error": tok_s / set_tok_s - 1, "set_tpot_ms": set_tpot_ms, "tpot_median_ms": tpot,
            "tpot_error": tpot / set_tpot_ms - 1,
            "token_error_ms_p50": float(np.percentile(errors_ms, 50)) if errors_ms.size else None,
            "token_error_ms_p99": float(np.percentile(errors_ms, 99)) if errors_ms.size else None,
            "token_error_ms_max": float(errors_ms.max()) if errors_ms.size else None,
            "tokens_timed": int(errors_ms.size),
            "lag_ms_p99": lv.get("lag_ms_p99"),
        })
    return pd.DataFrame(rows)
