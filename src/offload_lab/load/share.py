"""One process's share of a level: some closed-loop streams, or a slice of an open-loop schedule, on one event loop.

The same code runs in the load generator's own process (one worker) and in each worker process of
:mod:`offload_lab.load.workers`. During the share the loop only sends, stamps and keeps raw reads: with ``defer``
every parse, every record and every event line wait until the share ends. Streams of one batch finish together, and
a finishing stream's parse on the loop that stamps the others' last tokens was the largest client error at 64
streams and beyond (issue 15: -0.3 to -2.6% rate error, p99 up to 34 ms). The stop rule needs each outcome at once,
so it gets :func:`offload_lab.load.client.quick_ok`, a verdict from the stream's last event only; the full parse has
the last word (see :func:`offload_lab.load.closed_loop.run_level`).
"""

from __future__ import annotations

import asyncio
import gc
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offload_lab.core import stats
from offload_lab.load import client as load
from offload_lab.load import journal
from offload_lab.load.endpoint import Endpoint
from offload_lab.load.workloads import PreparedWorkload, RequestSpec

LAG_INTERVAL_S = 0.005
# A stream whose gaps between token chunks are all below this was delivered in a burst, not as generated.
BURST_ITL_MS = 0.05


async def sleep_until(t_ns: int) -> None:
    """Sleep until the monotonic clock reads ``t_ns``, never less: uvloop's timers count whole milliseconds and may
    wake up to one early, which would send an open-loop request before its intended time."""
    while (left := t_ns - time.monotonic_ns()) > 0:
        await asyncio.sleep(left / 1e9)


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
        p99 = float(np.percentile(self.lags_ms, 99)) if self.lags_ms else 0.0
        return {"lag_ms_median": s["median"], "lag_ms_p99": p99, "lag_ms_max": s["max"], "lag_samples": s["n"]}


def _usage() -> dict[str, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": time.process_time(), "wall_s": time.monotonic(), "utime_s": r.ru_utime, "stime_s": r.ru_stime,
            "nvcsw": r.ru_nvcsw, "nivcsw": r.ru_nivcsw, **schedstat()}


def schedstat(pid: int | str = "self") -> dict[str, float]:
    """Seconds on a CPU and seconds runnable but waiting for one (the run queue), from /proc/PID/schedstat (Linux
    with schedstats; empty elsewhere). Run-queue wait is the machine's share of a late token: the process was ready
    and no core was free."""
    try:
        on_cpu, waiting, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return {}
    return {"oncpu_s": int(on_cpu) / 1e9, "runq_wait_s": int(waiting) / 1e9}


def usage_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """This process's CPU over the share: seconds, share of one core, context switches."""
    d = {k: after[k] - before[k] for k in before if k in after}
    d["cpu_util"] = d["cpu_s"] / d["wall_s"] if d["wall_s"] > 0 else None
    return d


@dataclass
class ShareConfig:
    """What one process runs. Picklable: it crosses to worker processes."""

    worker: int = 0
    streams: list[int] = field(default_factory=list)  # closed loop: the stream numbers of this share
    schedule: list[tuple[int, int]] | None = None  # open loop: (request index, intended offset from start, ns)
    max_concurrency: int | None = None  # open loop: cap on requests in flight in this share
    defer: bool = True
    level: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    cpus: tuple[int, ...] | None = None  # worker processes: the CPUs this share's process is pinned to
    journal: Any = None  # the pipe to the journal writer (a Connection; it crosses to a worker process too)


@dataclass
class ShareResult:
    worker: int
    events: list[dict[str, Any]] = field(default_factory=list)
    inflight: list[tuple[int, int]] = field(default_factory=list)  # (t_ns, +1 or -1)
    health: dict[str, Any] = field(default_factory=dict)
    quick_mismatches: int = 0


def cache_verdict(spec: RequestSpec, rec: load.RequestRecord) -> bool | None:
    """Whether the prefix cache did what the regime needs; None when the server does not report cached tokens."""
    return _cache_ok(spec.expect_cached_min, spec.expect_cached_max, rec)


def _cache_ok(lo: int, hi: int | None, rec: load.RequestRecord) -> bool | None:
    if rec.cached_tokens is None or not rec.ok:
        return None
    if rec.cached_tokens < lo:
        return False
    return hi is None or rec.cached_tokens <= hi


def is_burst(rec: load.RequestRecord) -> bool:
    itl = rec.itl_ms
    return len(itl) >= 3 and max(itl) < BURST_ITL_MS


def _base(spec: RequestSpec, cfg: ShareConfig, stream: int, turn: int) -> dict[str, Any]:
    return {**spec.meta, **cfg.extra, "kind": "request", "level": cfg.level, "stream": stream, "turn": turn,
            "worker": cfg.worker, "expect_cached_min": spec.expect_cached_min,
            "expected_prompt_tokens": spec.prompt_tokens}


def _event(rec: load.RequestRecord, base: dict[str, Any], cached: tuple[int, int | None],
           more: dict[str, Any]) -> dict[str, Any]:
    return rec.event(**{**base, "cache_ok": _cache_ok(*cached, rec), "burst": is_burst(rec), **more})


def request_event(spec: RequestSpec, rec: load.RequestRecord, cfg: ShareConfig, stream: int, turn: int,
                  **more: Any) -> dict[str, Any]:
    return _event(rec, _base(spec, cfg, stream, turn), (spec.expect_cached_min, spec.expect_cached_max), more)


def _to_journal(spec: RequestSpec, rec: load.RequestRecord, reads: load.Reads | None, cfg: ShareConfig, stream: int,
                turn: int, more: dict[str, Any]) -> None:
    """A finished request to the journal writer (:mod:`offload_lab.load.journal`): raw when ``reads`` is given (the
    writer parses it), else already parsed. No parsing here: this runs on the timing loop."""
    if cfg.journal is not None:
        journal.send(cfg.journal, (rec, reads, _base(spec, cfg, stream, turn),
                                   (spec.expect_cached_min, spec.expect_cached_max), more))


def journal_event(item: tuple[Any, ...]) -> dict[str, Any]:
    """In the journal writer: the event a :func:`_to_journal` item stands for, parsed as the level's end parses."""
    rec, reads, base, cached, more = item
    if reads is not None:
        load.finish_record(rec, reads)
    return _event(rec, base, cached, more)


def _finish_pending(pending: list[Any], result: ShareResult, cfg: ShareConfig) -> None:
    for spec, rec, reads, stream, turn, more in pending:
        load.finish_record(rec, reads)
        result.quick_mismatches += more["quick_ok"] != rec.ok
        result.events.append(request_event(spec, rec, cfg, stream, turn, **more))
    pending.clear()


Report = Callable[[bool], bool]  # the stop rule: given an outcome, True when the level must halt


async def run_share(endpoint: Endpoint, work: PreparedWorkload, cfg: ShareConfig, report: Report,
                    halted: Callable[[], bool], start_at_ns: int | None = None) -> ShareResult:
    """Run this share to its end or to a halt; parse and build events afterwards when ``cfg.defer``."""
    result = ShareResult(worker=cfg.worker)
    # A chat feeds the server's reply into its next turn, so its stream must be parsed as it ends.
    defer = cfg.defer and work.spec.regime != "agent_turns"
    pending: list[tuple[RequestSpec, load.RequestRecord, load.Reads, int, int, dict[str, Any]]] = []
    width = len(cfg.streams) if cfg.schedule is None else (cfg.max_concurrency or len(cfg.schedule))
    async with endpoint.async_session(width) as client:
        lag = LagMonitor()

        async def one(spec: RequestSpec, stream: int, turn: int, more: dict[str, Any]) -> load.RequestRecord | None:
            result.inflight.append((time.monotonic_ns(), +1))
            rec, reads = await load.stream_raw(client, endpoint, spec.endpoint, spec.payload, spec.expected_tokens,
                                               spec.prompt_tokens)
            result.inflight.append((rec.t_end_ns or time.monotonic_ns(), -1))
            ok = load.quick_ok(rec, reads)
            if defer:
                pending.append((spec, rec, reads, stream, turn, {**more, "quick_ok": ok}))
                _to_journal(spec, rec, reads, cfg, stream, turn, {**more, "quick_ok": ok})
                report(ok)
                return None
            load.finish_record(rec, reads)
            result.quick_mismatches += ok != rec.ok
            result.events.append(request_event(spec, rec, cfg, stream, turn, quick_ok=ok, **more))
            _to_journal(spec, rec, None, cfg, stream, turn, {"quick_ok": ok, **more})
            report(rec.ok)
            return rec

        async def closed_stream(s: int) -> None:
            previous: load.RequestRecord | None = None
            turn = 0
            while not halted():
                spec = work.next_request(s, turn, previous)
                if spec is None:
                    return
                previous = await one(spec, s, turn, {})
                turn += 1
                if work.think_time_s and not halted():
                    await asyncio.sleep(work.think_time_s)

        async def open_request(i: int, intended_ns: int, sem: asyncio.Semaphore | None) -> None:
            spec = work.queues[i][0]
            if sem is None:
                await one(spec, i, 0, {"t_intended_ns": intended_ns})
                return
            async with sem:
                await one(spec, i, 0, {"t_intended_ns": intended_ns})

        # Python's cyclic garbage collector pauses the whole client for tens of milliseconds once enough objects
        # pile up (seen as all streams' tokens late at once); a level is short, so collect before and not during,
        # and before the common start: a collection after it made an open loop's first sends late.
        gc.collect()
        gc.disable()
        if start_at_ns is not None:
            await sleep_until(start_at_ns)
        t0 = start_at_ns or time.monotonic_ns()
        before = _usage()
        lag.start()
        tasks: list[asyncio.Task] = []
        try:
            if cfg.schedule is None:
                tasks = [asyncio.create_task(closed_stream(s)) for s in cfg.streams]
            else:
                # One dispatcher sleeps to each intended time and launches the request; a late send goes at once,
                # and its lateness (sent minus intended) is in the record.
                sem = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
                for i, offset_ns in cfg.schedule:
                    if halted():
                        break
                    await sleep_until(t0 + offset_ns)
                    tasks.append(asyncio.create_task(open_request(i, t0 + offset_ns, sem)))
            await asyncio.gather(*tasks)
        except BaseException as e:
            # One stream failed outright, or the level was interrupted (SIGINT/SIGTERM cancel the loop's tasks):
            # stop the others before the client closes under them, and hand the requests that did finish to the
            # caller on the exception, so they are written, not lost.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            _finish_pending(pending, result, cfg)
            e.finished_events = list(result.events)  # type: ignore[attr-defined]
            raise
        finally:
            after = _usage()
            gc.enable()
            await lag.stop()
    _finish_pending(pending, result, cfg)
    result.health = {"worker": cfg.worker, "streams": len(cfg.streams) if cfg.schedule is None else len(cfg.schedule),
                     "defer": defer, **usage_delta(before, after), **lag.summary()}
    return result
