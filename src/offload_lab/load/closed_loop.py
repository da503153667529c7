"""Closed-loop streams: N streams, each sending its next request when its last one ends.

Statistics are taken only over the window in which all N streams are in flight (from the moment the last stream
sends its first request to the moment the first stream receives its last token), so ramp-up and drain do not flatter
or penalise a level; the time-weighted concurrency actually achieved over that window is reported beside N. The
client watches its own event loop: when its lag is large against the time per token it measures, the run is
flagged, since then the client, not the server, set the pace. A stop rule declared before the run ends a level when
errors pass a rate (with a minimum count, so a single disconnect does not end a sweep) or fail in a row.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from offload_lab.load import client as load
from offload_lab.core import runs
from offload_lab.load import metrics as server_metrics
from offload_lab.core import stats
from offload_lab.load.workloads import PreparedWorkload, RequestSpec

LAG_INTERVAL_S = 0.005
# The client's loop lag (p99) above this share of the measured TPOT flags the run: the clock may not be the server's.
LAG_FLAG_FRACTION = 0.1
# A stream whose gaps between token chunks are all below this was delivered in a burst, not as generated.
BURST_ITL_MS = 0.05


class StopRule(BaseModel):
    """Declared in the campaign file before a run; checked after every request."""

    model_config = ConfigDict(extra="forbid")

    max_error_rate: float = Field(0.05, ge=0, le=1, description="stop when errors / requests exceeds this ...")
    min_errors: int = Field(2, ge=1, description="... and at least this many errors occurred")
    max_consecutive_failures: int = Field(5, ge=1, description="stop after this many failures in a row")


@dataclass
class StopState:
    rule: StopRule
    requests: int = 0
    errors: int = 0
    consecutive: int = 0
    reason: str | None = None

    def record(self, ok: bool) -> str | None:
        self.requests += 1
        if ok:
            self.consecutive = 0
        else:
            self.errors += 1
            self.consecutive += 1
        if self.reason is None:
            r = self.rule
            if self.errors >= r.min_errors and self.errors / self.requests > r.max_error_rate:
                self.reason = (f"error rate {self.errors}/{self.requests} is above {r.max_error_rate:.0%} with at "
                               f"least {r.min_errors} errors")
            elif self.consecutive >= r.max_consecutive_failures:
                self.reason = f"{self.consecutive} requests failed in a row"
        return self.reason


class LagMonitor:
    """Measures how late the client's event loop wakes up: a busy client delays every timestamp it takes."""

    def __init__(self, interval_s: float = LAG_INTERVAL_S):
        self.interval_s = interval_s
        self.lags_ms: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        while True:
            expected = time.monotonic_ns() + interval_ns
            await asyncio.sleep(self.interval_s)
            self.lags_ms.append(max(0, time.monotonic_ns() - expected) / 1e6)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def summary(self) -> dict[str, Any]:
        s = stats.summarize(self.lags_ms)
        arr = np.asarray(self.lags_ms) if self.lags_ms else np.zeros(1)
        return {"lag_ms_median": s["median"], "lag_ms_p99": float(np.percentile(arr, 99)),
                "lag_ms_max": s["max"], "lag_samples": s["n"]}


@dataclass
class Finished:
    stream: int
    turn: int
    spec: RequestSpec
    record: load.RequestRecord


@dataclass
class LevelResult:
    streams: int
    finished: list[Finished] = field(default_factory=list)
    inflight: list[tuple[int, int]] = field(default_factory=list)  # (t_ns, +1 or -1)
    window_ns: tuple[int, int] | None = None
    lag: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    stopped: str | None = None
    seconds: float = 0.0


def cache_verdict(spec: RequestSpec, rec: load.RequestRecord) -> bool | None:
    """Whether the prefix cache did what the regime needs; None when the server does not report cached tokens."""
    if rec.cached_tokens is None or not rec.ok:
        return None
    if rec.cached_tokens < spec.expect_cached_min:
        return False
    return spec.expect_cached_max is None or rec.cached_tokens <= spec.expect_cached_max


def is_burst(rec: load.RequestRecord) -> bool:
    itl = rec.itl_ms
    return len(itl) >= 3 and max(itl) < BURST_ITL_MS


def measurement_window(finished: list[Finished], streams: int) -> tuple[int, int] | None:
    """From the last stream's first send to the first stream's last token: every stream in flight in between."""
    first_sent: dict[int, int] = {}
    last_token: dict[int, int] = {}
    for f in finished:
        r = f.record
        first_sent[f.stream] = min(first_sent.get(f.stream, r.t_sent_ns), r.t_sent_ns)
        end = r.t_last_token_ns or r.t_end_ns or r.t_sent_ns
        last_token[f.stream] = max(last_token.get(f.stream, end), end)
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


async def run_level(base_url: str, work: PreparedWorkload, stop: StopState, log: runs.EventLog,
                    scrape_interval_s: float = 1.0, extra: dict[str, Any] | None = None) -> LevelResult:
    """Run one level (N streams) to its end or to the stop rule; every request is logged as it finishes."""
    n = work.streams
    result = LevelResult(streams=n)
    extra = extra or {}
    halt = asyncio.Event()
    started = time.monotonic()
    async with load.new_async_client(n) as client:
        scraper = server_metrics.Scraper(base_url, interval_s=scrape_interval_s)
        await scraper.start(client)
        lag = LagMonitor()
        lag.start()

        async def stream(s: int) -> None:
            previous: load.RequestRecord | None = None
            turn = 0
            while not halt.is_set():
                spec = work.next_request(s, turn, previous)
                if spec is None:
                    return
                result.inflight.append((time.monotonic_ns(), +1))
                rec = await load.stream_request(client, base_url, spec.endpoint, spec.payload, spec.expected_tokens)
                result.inflight.append((rec.t_end_ns or time.monotonic_ns(), -1))
                result.finished.append(Finished(s, turn, spec, rec))
                log.append(rec.event(**{
                    **spec.meta, **extra, "kind": "request", "level": n, "stream": s, "turn": turn,
                    "cache_ok": cache_verdict(spec, rec), "expect_cached_min": spec.expect_cached_min,
                    "expected_prompt_tokens": spec.prompt_tokens, "burst": is_burst(rec),
                }))
                if stop.record(rec.ok):
                    halt.set()
                    return
                previous = rec
                turn += 1
                if work.think_time_s:
                    try:
                        await asyncio.wait_for(halt.wait(), timeout=work.think_time_s)
                    except asyncio.TimeoutError:
                        pass

        # Python's cyclic garbage collector pauses the whole client for tens of milliseconds once enough objects
        # pile up (seen as all streams' tokens late at once); a level is short, so collect before and not during.
        gc.collect()
        gc.disable()
        tasks = [asyncio.create_task(stream(s)) for s in range(n)]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            # One stream failed outright: stop the others before the client closes under them.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            gc.enable()
            await lag.stop()
            await scraper.stop(client)
    for sample in scraper.samples:
        log.append({"kind": "metrics", "level": n, **sample, **extra})
    result.window_ns = measurement_window(result.finished, n)
    result.lag = lag.summary()
    result.server = server_metrics.summarize(scraper.samples)
    result.stopped = stop.reason
    result.seconds = time.monotonic() - started
    return result
