"""Closed-loop sweeps: output tokens per second per stream as streams are added, and the bar's verdict.

Shared by the ``concurrency``, ``agent_turns`` and ``cached_prefix`` experiments and ``bench`` (which is why it lives
here, below the experiments). For each stream count of a sweep, the regime's prompts are built and its caches primed
(untimed), then N closed-loop streams run (:mod:`offload_lab.load.closed_loop`). The study's bar is a median output
rate per stream (:data:`BAR_TOK_S`, 25 ms per token); aggregate throughput does not count. A level *holds the bar*
when its median per-stream rate is at or above it; the sweep reports the largest stream count up to which every
level held, the p5 at each count, and the provisioning count: the largest N up to which every level's median clears
the bar with a margin (the study used 10%).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from offload_lab.core import paths, runs, stats
from offload_lab.core import progress as progress_api
from offload_lab.core.errors import ProducerError, ServerError
from offload_lab.load import client as load
from offload_lab.load import closed_loop, health, workers, workloads
from offload_lab.load.bar import BAR_TOK_S, MARGIN, Bar, Margin, bar_of
from offload_lab.load.endpoint import Endpoint
from offload_lab.core.runs import EVENTS

LEVELS = "levels.csv"
SWEEP = "sweep.json"
REGIMES_TABLE = "regimes.csv"
VERDICTS = "verdicts.json"



class SweepStopped(ProducerError):
    """The stop rule ended the sweep; what was measured is kept and the run is marked stopped."""


class SweepParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: workloads.WorkloadSpec
    streams: list[int] = Field(min_length=1, description="stream counts, in the order they run")
    requests_per_stream: int = Field(4, ge=1, description="requests (turns) each stream sends at a level")
    bar_tok_s: Bar = BAR_TOK_S
    margin: Margin = MARGIN
    stop_rule: closed_loop.StopRule = Field(default_factory=closed_loop.StopRule)
    scrape_interval_s: float = Field(1.0, gt=0, description="seconds between /metrics scrapes")
    workers: int | None = Field(None, ge=1, description="client worker processes (None: one per 32 streams)")
    defer_parse: bool = Field(True, description="parse streams at the level's end, not as each ends")

    @field_validator("streams")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(n < 1 for n in v):
            raise ValueError("every stream count must be at least 1")
        return v


def run_sweep(run: runs.Run, base_url: str, params: SweepParams, model: str | None = None,
              progress: Any = print, subdir: str | None = None) -> dict[str, Any]:
    """Run every level into ``events.jsonl``; write ``levels.csv`` and ``sweep.json`` (under ``subdir`` of the run
    when given: one per regime). Raises :class:`SweepStopped` (after writing) when the stop rule ended it."""
    endpoint = Endpoint.of(base_url)
    endpoint.check_reachable()
    if model:
        endpoint.check_model(model)  # a list without it: not the server the campaign meant
    model = model or endpoint.first_model()
    run.update(server_model=model)
    stop = closed_loop.StopState(params.stop_rule)
    where = f"{subdir}/" if subdir else ""
    if subdir:
        run.file(subdir).mkdir(parents=True, exist_ok=True)
    cal = _calibration(inline=not params.defer_parse)
    with run.events(where + EVENTS) as log:
        if cal is not None:
            log.append({"kind": "calibration", **cal.model_dump()})
        levels_done = progress_api.counting(f"regime {params.workload.regime}", len(params.streams), "levels")
        for n in params.streams:
            try:
                work = workloads.prepare(params.workload, base_url, model, n, params.requests_per_stream,
                                         salt=f"{run.run_id}/{n}")
            except (httpx.HTTPError, ServerError) as e:
                # The server went away between levels: stop here, keep what the earlier levels measured.
                stop.reason = f"preparing {n} stream(s) failed, the server is gone or broken ({type(e).__name__}: {e})"
                log.append({"kind": "stop", "level": n, "reason": stop.reason})
                if levels_done.done == 0:
                    # Nothing measured at all: the server's fault, said as such (exit 3), the run kept and failed.
                    raise ServerError(f"{e}; nothing was measured (the run is kept in {run.path})") from None
                break
            for p in work.primed:
                log.append({"kind": "prime", "level": n, **p})
            k = params.workers or workers.default_workers(n)
            result = load.run_sync(closed_loop.run_level(endpoint, work, stop, log, params.scrape_interval_s,
                                                         workers=k, defer=params.defer_parse))
            log.append(level_event(result))
            levels_done.add()
            if progress:
                progress(f"{params.workload.regime}: {n} stream(s) done in {result.seconds:.1f} s")
            if result.stopped:
                break
    events = runs.read_events(run.file(where + EVENTS))
    levels = summarize(events, params.bar_tok_s)
    run.write_table(where + LEVELS, levels)
    verdict = sweep_verdict(levels, params.bar_tok_s, params.margin)
    verdict.update(regime=params.workload.regime, stopped=stop.reason, requests=stop.requests, errors=stop.errors)
    run.write_json(where + SWEEP, verdict)
    if stop.reason:
        raise SweepStopped(f"the stop rule ended the sweep at {levels['streams'].iloc[-1] if len(levels) else '?'} "
                           f"stream(s): {stop.reason}; what was measured is kept in {run.path}")
    medians = verdict["median_by_streams"]
    if medians and all(v is None for v in medians.values()):
        # Tokens that all come in one read have no time between them: a speed of 0 or infinity, never a result.
        raise ServerError(f"no level's per-stream speed could be measured ({len(medians)} level(s)): no "
                          "request succeeded, or each stream's tokens came in one read without time between them "
                          f"(a server or proxy that buffers the stream?); what was measured is kept in {run.path}")
    return verdict


def level_event(result: closed_loop.LevelResult) -> dict[str, Any]:
    return {
        "kind": "level", "level": result.streams, "window_ns": list(result.window_ns) if result.window_ns else None,
        "achieved_concurrency": closed_loop.achieved_concurrency(result.inflight, result.window_ns),
        "stopped": result.stopped, "stop_replayed": result.stop_replayed, "seconds": result.seconds, **result.lag,
        "workers": result.workers,
        **{f"server_{k}" if not k.startswith("server_") else k: v for k, v in result.server.items()},
    }


def summarize(events: list[dict[str, Any]], bar_tok_s: float = BAR_TOK_S) -> pd.DataFrame:
    """One row per level, recomputed from the raw events."""
    rows = []
    cal = next((health.Calibration(source=e["source"], points=e["points"]) for e in events
                if e.get("kind") == "calibration"), None)
    for lv in (e for e in events if e.get("kind") == "level"):
        n = lv["level"]
        reqs = [e for e in events if e.get("kind") == "request" and e.get("level") == n]
        window = lv.get("window_ns")
        inside = [e for e in reqs if window and e.get("t_first_token_ns") and e["t_first_token_ns"] >= window[0]
                  and (e.get("t_last_token_ns") or 0) <= window[1]]
        good = [e for e in inside if e.get("ok")]
        tok = stats.summarize([e["tok_s"] for e in good])
        tpot = stats.summarize([e["tpot_ms"] for e in good])
        ttft = stats.summarize([e["ttft_s"] for e in good])
        itl = stats.summarize([x for e in good for x in _itl_ms(e)])
        verdicts = [e.get("cache_ok") for e in inside if e.get("cache_ok") is not None]
        tpot_median = tpot["median"]
        verdict = health.verdict(cal, streams=n, workers=lv.get("workers") or [{"lag_ms_p99": lv.get("lag_ms_p99")}],
                                 tpot_ms=tpot_median, ttft_ms=_scale(ttft["median"], 1e3))
        rows.append({
            "streams": n, "requests": len(reqs), "in_window": len(inside), "ok_in_window": len(good),
            "errors": sum(1 for e in reqs if not e.get("ok")),
            "achieved_concurrency": lv.get("achieved_concurrency"),
            "tok_s_median": tok["median"], "tok_s_p5": tok["p5"], "tok_s_p95": tok["p95"], "tok_s_p99": tok["p99"],
            "tpot_median_ms": tpot_median, "tpot_p5_ms": tpot["p5"], "tpot_p95_ms": tpot["p95"],
            "ttft_median_s": ttft["median"], "ttft_p95_s": ttft["p95"], "ttft_p99_s": ttft["p99"],
            "itl_median_ms": itl["median"], "itl_p99_ms": itl["p99"] if itl["p99"] is not None else itl["max"],
            "holds_bar": bool(tok["median"] is not None and tok["median"] >= bar_tok_s),
            "cache_checked": len(verdicts), "cache_misses": sum(1 for v in verdicts if v is False),
            "bursts": sum(1 for e in inside if e.get("burst")),
            "lag_ms_p99": lv.get("lag_ms_p99"),
            "workers": len(lv.get("workers") or []) or 1,
            "worker_cpu_max": max((w.get("cpu_util") or 0.0 for w in lv.get("workers") or []), default=None),
            # The client-health verdict (load.health): `flag` only when the client's calibrated error could move
            # the level's tok/s, TPOT or TTFT past the tolerance; `client_lag_flag` is that flag (the old lag rule
            # is gone: it cried wolf).
            "client_health": verdict["verdict"],
            "client_health_reasons": "; ".join(verdict.get("reasons") or []),
            "client_rate_error_bound": verdict.get("client_rate_error_bound"),
            "client_lag_flag": verdict["verdict"] == "flag",
            "kv_cache_usage_max": lv.get("server_kv_cache_usage_max"),
            "prefix_cache_hit_rate": lv.get("server_prefix_cache_hit_rate"),
            "requests_waiting_max": lv.get("server_requests_waiting_max"),
            "spec_decode_acceptance": lv.get("server_spec_decode_acceptance"),
            "stopped": lv.get("stopped"),
            # Beside the server's own histograms over the same level (all its requests, not only the window).
            "ttft_mean_s_all": _mean([e["ttft_s"] for e in reqs if e.get("ok")]),
            "server_ttft_mean_s": lv.get("server_ttft_mean_s"),
            "tpot_mean_ms_all": _mean([e["tpot_ms"] for e in reqs if e.get("ok")]),
            "server_tpot_mean_ms": _scale(lv.get("server_tpot_mean_s"), 1e3),
            "server_itl_mean_ms": _scale(lv.get("server_itl_mean_s"), 1e3),
            # Means beside the medians (the window's good requests), and what the level delivered in all.
            "tok_s_mean": tok["mean"], "tpot_mean_ms": tpot["mean"], "ttft_mean_s": ttft["mean"],
            **level_throughput(reqs, window),
        })
    return pd.DataFrame(rows)


def level_throughput(requests: list[dict[str, Any]], window: list[int] | None) -> dict[str, float | None]:
    """What a level delivered in all over its steady-state window, as `vllm bench serve` reports a run:
    ``output_tok_s_total``, the output tokens of good requests whose arrival time falls inside the window per second
    (token-weighted, counted per chunk, so requests straddling the window count for their part inside), and
    ``requests_per_s``, good requests that finished inside it per second. Aggregate throughput says how much the
    server does, not whether one stream is usable: the bar is per stream."""
    if not window or window[1] <= window[0]:
        return {"window_s": None, "output_tok_s_total": None, "requests_per_s": None}
    w0, w1 = window
    seconds = (w1 - w0) / 1e9
    tokens = 0
    done = 0
    for e in requests:
        if not e.get("ok"):
            continue
        times = e.get("token_times_ns") or []
        counts = e.get("chunk_tokens") or [1] * len(times)
        tokens += sum(c for t, c in zip(times, counts) if w0 <= t <= w1)
        end = e.get("t_last_token_ns")
        done += bool(end and w0 <= end <= w1)
    return {"window_s": seconds, "output_tok_s_total": tokens / seconds, "requests_per_s": done / seconds}


def _calibration(inline: bool = False) -> health.Calibration | None:
    """The client's calibration from the newest clock check in the repository's data (None outside a checkout)."""
    try:
        return health.find_calibration(paths.data_root(), inline)
    except (OSError, ValueError):
        return None


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _scale(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _itl_ms(event: dict[str, Any]) -> list[float]:
    t = event.get("token_times_ns") or []
    return [(b - a) / 1e6 for a, b in zip(t, t[1:])]


def sweep_verdict(levels: pd.DataFrame, bar_tok_s: float, margin: float) -> dict[str, Any]:
    """How many streams held the bar, the provisioning count with the margin, and the p5 at each count."""
    ordered = levels.sort_values("streams")
    held = provision = 0
    for _, row in ordered.iterrows():
        med = row["tok_s_median"]
        if med is None or (isinstance(med, float) and np.isnan(med)) or med < bar_tok_s:
            break
        held = int(row["streams"])
    for _, row in ordered.iterrows():
        med = row["tok_s_median"]
        if med is None or (isinstance(med, float) and np.isnan(med)) or med < bar_tok_s * (1 + margin):
            break
        provision = int(row["streams"])
    lost = [int(r["streams"]) for _, r in ordered.iterrows() if not r["holds_bar"]]
    return {
        "bar_tok_s": bar_tok_s, "margin": margin,
        "held_bar_up_to_streams": held,
        "first_level_below_bar": lost[0] if lost else None,
        "provisioning_streams": provision,
        "p5_by_streams": {int(r["streams"]): _num(r["tok_s_p5"]) for _, r in ordered.iterrows()},
        "median_by_streams": {int(r["streams"]): _num(r["tok_s_median"]) for _, r in ordered.iterrows()},
    }


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else float(x)


def summarize_run(run_dir: Path) -> pd.DataFrame:
    m = runs.load_manifest(run_dir)
    bar = bar_of(m.get("parameters") or {})
    return summarize(runs.read_events(Path(run_dir) / EVENTS), bar)



class RegimeSweepParams(BaseModel):
    """The ``concurrency`` experiment: several regimes, each swept over the same stream counts."""

    model_config = ConfigDict(extra="forbid")

    regimes: dict[str, workloads.WorkloadSpec] = Field(min_length=1, description="name -> workload")
    streams: list[int] = Field(min_length=1)
    requests_per_stream: int = Field(4, ge=1)
    bar_tok_s: Bar = BAR_TOK_S
    margin: Margin = MARGIN
    stop_rule: closed_loop.StopRule = Field(default_factory=closed_loop.StopRule)
    scrape_interval_s: float = Field(1.0, gt=0)

    def longest_request_tokens(self) -> int:
        """Prompt plus output of the longest request of any regime: what the server's max_model_len must hold."""
        return max(w.longest_prompt(self.requests_per_stream) + w.output_tokens for w in self.regimes.values())

    def sweep(self, name: str) -> SweepParams:
        return SweepParams(workload=self.regimes[name], streams=self.streams,
                           requests_per_stream=self.requests_per_stream, bar_tok_s=self.bar_tok_s,
                           margin=self.margin, stop_rule=self.stop_rule, scrape_interval_s=self.scrape_interval_s)


def run_regimes(run: runs.Run, base_url: str, params: RegimeSweepParams, progress: Any = print) -> pd.DataFrame:
    """Sweep every regime into its own subdirectory; write ``regimes.csv`` (all levels, a ``regime`` column) and
    ``verdicts.json``. A regime stopped by its rule ends the experiment after its data are written."""
    tables, verdicts = [], {}
    try:
        for name in params.regimes:
            runs.check_name("regime", name)
            verdicts[name] = run_sweep(run, base_url, params.sweep(name), progress=progress, subdir=name)
            tables.append(summarize_run_regime(run.path, name, params.bar_tok_s))
    finally:
        table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
        run.write_table(REGIMES_TABLE, table)
        run.write_json(VERDICTS, verdicts)
    return table


def summarize_run_regime(run_dir: Path, regime: str, bar_tok_s: float = BAR_TOK_S) -> pd.DataFrame:
    table = summarize(runs.read_events(Path(run_dir) / regime / EVENTS), bar_tok_s)
    table.insert(0, "regime", regime)
    return table


def load_verdicts(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / VERDICTS).read_text())


REGIME_COLORS = {"short": "#1b5e9e", "cold_prefill": "#7a7a7a", "shared_prefix": "#b0461b",
                 "private_context": "#2e7d32", "agent_turns": "#6a3d9a"}


def draw_streams(ax: Any, table: pd.DataFrame, bar_tok_s: float) -> None:
    """Median output tok/s per stream against streams, one line per regime, p5 dotted, the bar drawn (a sweep's
    ``regimes.csv`` on a matplotlib axis; the figures of every sweep experiment draw it)."""
    for regime, g in table.groupby("regime", sort=False):
        g = g.sort_values("streams")
        color = REGIME_COLORS.get(str(regime), None)
        ax.plot(g["streams"], g["tok_s_median"], marker="o", markersize=3.5, linewidth=1.4, color=color,
                label=str(regime).replace("_", " "))
        ax.plot(g["streams"], g["tok_s_p5"], linestyle=":", linewidth=1.0, color=color)
    ax.axhline(bar_tok_s, color="black", linestyle="--", linewidth=1.0, label="bar")
    ax.plot([], [], linestyle=":", color="grey", label="p5 (dotted)")
    ax.set_xticks(sorted(table["streams"].unique()))
    ax.set_xlabel("streams")
    ax.set_ylabel("output tok/s per stream")
    ax.set_ylim(bottom=0)
    # One row while the labels are few and short; a pod campaign's five named regimes would run past the edge.
    labels = ax.get_legend_handles_labels()[1]
    ncol = 5 if len(labels) <= 5 and sum(map(len, labels)) <= 60 else 3
    ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=ncol)
