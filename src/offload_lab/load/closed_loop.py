"""Closed-loop streams: N streams, each sending its next request when its last one ends (and, through the same
runner, open-loop schedules: :mod:`offload_lab.load.open_loop`).

Statistics are taken only over the window in which all N streams are in flight (from the moment the last stream
sends its first request to the moment the first stream receives its last token), so ramp-up and drain do not flatter
or penalise a level; the time-weighted concurrency actually achieved over that window is reported beside N. A level
runs in this process or sharded over worker processes (:mod:`offload_lab.load.workers`); either way parsing waits
for the level's end (:mod:`offload_lab.load.share`) and each process records its own loop lag and CPU, from which
:mod:`offload_lab.load.health` judges whether the client could have moved the figures.

A stop rule declared before the run ends a level when errors pass a rate (with a minimum count, so a single
disconnect does not end a sweep) or fail in a row. It counts per level by default (``scope: level``), or over the
last ``window`` requests (``scope: window``), or over the whole sweep (``scope: sweep``, the old rule, under which 60
good requests at one stream hid a failing level). It runs on each request's quick verdict as it ends; when the full
parse at the level's end disagrees for some request, the level's decision is replayed from the final verdicts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from offload_lab.core import progress, runs
from offload_lab.load import metrics as server_metrics
from offload_lab.load import workers as workers_mod
from offload_lab.load.endpoint import Endpoint
from offload_lab.load.journal import Journal
from offload_lab.load.share import (  # noqa: F401 (LagMonitor, cache_verdict, is_burst: re-exported)
    BURST_ITL_MS,
    LagMonitor,
    ShareConfig,
    cache_verdict,
    is_burst,
    journal_event,
    run_share,
)
from offload_lab.load.workloads import PreparedWorkload

# The old client-health rule: loop lag p99 above this share of the measured TPOT. Kept as a recorded figure only;
# the verdict is :func:`offload_lab.load.health.verdict` (a constant delay cancels out of TPOT; lag alone cried wolf).
LAG_FLAG_FRACTION = 0.1


class StopRule(BaseModel):
    """Declared in the campaign file before a run; checked after every request."""

    model_config = ConfigDict(extra="forbid")

    max_error_rate: float = Field(0.05, ge=0, le=1, description="stop when errors / requests exceeds this ...")
    min_errors: int = Field(2, ge=1, description="... and at least this many errors occurred")
    max_consecutive_failures: int = Field(5, ge=1, description="stop after this many failures in a row")
    scope: Literal["level", "window", "sweep"] = Field(
        "level", description="errors counted per level, sliding window or sweep")
    window: int | None = Field(None, ge=1, description="scope window: requests in the sliding window")

    @model_validator(mode="after")
    def _window(self) -> StopRule:
        if (self.scope == "window") != (self.window is not None):
            raise ValueError("stop_rule: `window` (a number of requests) goes with `scope: window`, and only with it")
        return self


@dataclass
class StopState:
    """The rule's counters. ``requests``/``errors`` are the sweep's totals; the rule itself counts in its scope."""

    rule: StopRule
    requests: int = 0
    errors: int = 0
    consecutive: int = 0
    reason: str | None = None
    level: int | None = None
    recent: deque = field(default_factory=deque)  # outcomes in scope (level: this level; window: the last k)
    _snapshot: dict[str, Any] | None = None

    def begin_level(self, level: int) -> None:
        self.level = level
        if self.rule.scope == "level":
            self.recent.clear()
            self.consecutive = 0
        self._snapshot = {"requests": self.requests, "errors": self.errors, "consecutive": self.consecutive,
                          "reason": self.reason, "recent": deque(self.recent)}

    def record(self, ok: bool) -> str | None:
        self.requests += 1
        self.errors += not ok
        self.consecutive = 0 if ok else self.consecutive + 1
        if self.rule.scope != "sweep":
            self.recent.append(ok)
        if self.rule.scope == "window" and len(self.recent) > (self.rule.window or 0):
            self.recent.popleft()
        if self.reason is None:
            r = self.rule
            n = len(self.recent) if r.scope != "sweep" else self.requests
            e = (len(self.recent) - sum(self.recent)) if r.scope != "sweep" else self.errors
            at = f"at {self.level} stream(s)" if self.level is not None else "in this level"
            where = {"level": at, "window": f"in the last {n} requests",
                     "sweep": "over the sweep"}[r.scope]
            if e >= r.min_errors and e / n > r.max_error_rate:
                self.reason = (f"error rate {e}/{n} {where} is above {r.max_error_rate:.0%} with at least "
                               f"{r.min_errors} errors")
            elif self.consecutive >= r.max_consecutive_failures:
                self.reason = f"{self.consecutive} requests failed in a row ({where.replace('in the last', 'of')})"
        return self.reason

    def replay_level(self, outcomes: list[bool]) -> str | None:
        """Decide the level again from its final verdicts (in completion order), from the state at its start."""
        if self._snapshot is None:
            return self.reason
        snap = self._snapshot
        self.requests, self.errors, self.consecutive, self.reason = (snap["requests"], snap["errors"],
                                                                     snap["consecutive"], snap["reason"])
        self.recent = deque(snap["recent"])
        for ok in outcomes:
            self.record(ok)
        return self.reason


def _unjournaled(journal: Journal | None, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events the journal writer did not append (all of them without one); the writer is done after this."""
    return events if journal is None else journal.finish(events)


@dataclass
class LevelResult:
    streams: int
    events: list[dict[str, Any]] = field(default_factory=list)  # request events, in send order
    inflight: list[tuple[int, int]] = field(default_factory=list)  # (t_ns, +1 or -1)
    window_ns: tuple[int, int] | None = None
    lag: dict[str, Any] = field(default_factory=dict)  # the worst worker's loop lag
    workers: list[dict[str, Any]] = field(default_factory=list)  # each process's lag and CPU
    server: dict[str, Any] = field(default_factory=dict)
    stopped: str | None = None
    stop_replayed: bool = False
    seconds: float = 0.0


def measurement_window(events: list[dict[str, Any]], streams: int) -> tuple[int, int] | None:
    """From the last stream's first send to the first stream's last token: every stream in flight in between."""
    first_sent: dict[int, int] = {}
    last_token: dict[int, int] = {}
    for e in events:
        s, sent = e["stream"], e["t_sent_ns"]
        first_sent[s] = min(first_sent.get(s, sent), sent)
        end = e.get("t_last_token_ns") or e.get("t_end_ns") or sent
        last_token[s] = max(last_token.get(s, end), end)
    if len(first_sent) < streams:
        return None
    start, end = max(first_sent.values()), min(last_token.values())
    return (start, end) if end > start else None


def achieved_concurrency(changes: list[tuple[int, int]], window: tuple[int, int] | None) -> float | None:
    """Time-weighted mean number of requests in flight over the window."""
    if window is None:
        return None
    start, end = window
    level, area, t_prev = 0, 0.0, start
    for t, d in sorted(changes):
        if t <= start:
            level += d
            continue
        if t >= end:
            break
        area += level * (t - t_prev)
        level += d
        t_prev = t
    area += level * (end - t_prev)
    return area / (end - start)


async def run_level(base_url: str | Endpoint, work: PreparedWorkload, stop: StopState, log: runs.EventLog,
                    scrape_interval_s: float | None = 1.0, extra: dict[str, Any] | None = None, workers: int = 1,
                    defer: bool = True, configs: list[ShareConfig] | None = None,
                    pin: list[tuple[int, ...]] | None = None) -> LevelResult:
    """Run one level (N streams, or the open-loop ``configs`` given) to its end or to the stop rule; each request is
    logged as it finishes (:mod:`offload_lab.load.journal`), in completion order. ``scrape_interval_s`` None
    scrapes /metrics only before and after. ``pin`` (:func:`workers.pin_plan`): the CPUs of each worker process,
    when there are several."""
    endpoint = Endpoint.of(base_url)
    n = work.streams
    result = LevelResult(streams=n)
    stop.begin_level(n)
    halt = {"now": False}
    # How many of the level's requests have ended, for the campaign's display (core.progress); closed loop only.
    planned = n * work.requests_per_stream if configs is None else 0
    ended = progress.counting(f"level {n} streams", planned, "requests") if planned else None

    def report(ok: bool) -> bool:
        if ended is not None and ended.done < planned:
            ended.add()
        if stop.record(ok):
            halt["now"] = True
        return halt["now"]

    if configs is None:
        configs = [ShareConfig(worker=k, streams=streams, defer=defer, level=n, extra=dict(extra or {}),
                               cpus=pin[k % len(pin)] if pin else None)
                   for k, streams in enumerate(workers_mod.shard(n, max(1, min(workers, n))))]
    # Each finished request reaches the log as it finishes, through a writer process (SIGKILL mid-level keeps it).
    path = getattr(log, "path", None)
    journal = Journal.start(path, len(configs), workers_mod._context(), journal_event) if path is not None else None
    if journal is not None and await asyncio.to_thread(journal.wait_ready):
        configs = [dataclasses.replace(c, journal=w) for c, w in zip(configs, journal.senders)]
    try:
        return await _run(endpoint, work, stop, log, configs, report, halt, result, journal, scrape_interval_s, extra)
    finally:
        if journal is not None:
            journal.close_senders()  # a writer never outlives its level waiting for a pipe


async def _run(endpoint: Endpoint, work: PreparedWorkload, stop: StopState, log: runs.EventLog,
               configs: list[ShareConfig], report: Any, halt: dict[str, bool], result: LevelResult,
               journal: Journal | None, scrape_interval_s: float | None,
               extra: dict[str, Any] | None) -> LevelResult:
    n = work.streams
    started = time.monotonic()
    async with endpoint.async_session(2) as client:
        scraper = server_metrics.Scraper(endpoint.base_url, interval_s=scrape_interval_s or 0.0)
        await scraper.start(client, during=scrape_interval_s is not None)
        try:
            if len(configs) == 1:
                shares = [await run_share(endpoint, work, configs[0], report, lambda: halt["now"])]
            else:
                shares = await workers_mod.run_workers(endpoint, work, configs, report)
        except BaseException as e:
            # Interrupted (SIGINT, SIGTERM) or failed mid-level: the requests that finished are measurements too.
            finished = getattr(e, "finished_events", [])
            for event in sorted(_unjournaled(journal, finished), key=lambda ev: ev["t_sent_ns"]):
                log.append(event)
            log.append({"kind": "stop", "level": n, "reason": f"level interrupted ({type(e).__name__}); "
                        f"{len(finished)} finished request(s) kept"})
            raise
        finally:
            await scraper.stop(client)
    for sample in scraper.samples:
        log.append({"kind": "metrics", "level": n, **sample, **(extra or {})})
    result.events = sorted((e for sh in shares for e in sh.events), key=lambda e: e["t_sent_ns"])
    for e in _unjournaled(journal, result.events):
        log.append(e)
    result.inflight = [c for sh in shares for c in sh.inflight]
    if any(sh.quick_mismatches for sh in shares):
        # The full parse disagreed with a quick verdict: the level's decision is taken again from final verdicts.
        done = sorted(result.events, key=lambda e: e.get("t_end_ns") or e["t_sent_ns"])
        stop.replay_level([bool(e["ok"]) for e in done])
        result.stop_replayed = True
    if configs[0].schedule is None:
        result.window_ns = measurement_window(result.events, n)
    result.workers = [sh.health for sh in shares]
    worst = max(shares, key=lambda sh: sh.health.get("lag_ms_p99") or 0.0)
    result.lag = {k: worst.health.get(k) for k in ("lag_ms_median", "lag_ms_p99", "lag_ms_max", "lag_samples")}
    result.server = server_metrics.summarize(scraper.samples)
    result.server["problems"] = list(scraper.problems)
    result.stopped = stop.reason
    result.seconds = time.monotonic() - started
    return result
