"""Worker processes for the load generator: a level's streams sharded over K processes, a coordinator, raw
timestamps merged afterwards (the approach of AIPerf's workers and inference-perf's load generator; no code taken).

The coordinator shards closed-loop streams round-robin (or an open-loop schedule by request index), starts K
processes (``forkserver``, else ``spawn``: no inherited sockets or loops), waits until every worker has its loop and
its HTTP session, then writes one start time on the system-wide monotonic clock and lets them go. Each worker runs
:func:`offload_lab.load.share.run_share` on its own event loop (uvloop when importable) and sends every outcome to the
coordinator at once, which runs the stop rule for the whole level, in completion order, and raises a shared flag
that halts all workers between requests. When its share ends, a worker parses its streams and writes its records,
its loop lag and its own CPU use to a file, which the coordinator merges.

Merging is valid because ``time.monotonic_ns()`` reads ``CLOCK_MONOTONIC``, one clock for every process of a Linux
machine: stamps of workers, coordinator and token source lie on one timeline. The /metrics scraper runs in the
coordinator, so a scrape never delays a worker's stamps.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from offload_lab.core.errors import ProducerError
from offload_lab.load import client as load
from offload_lab.load.endpoint import Endpoint
from offload_lab.load.share import ShareConfig, ShareResult, run_share
from offload_lab.load.workloads import PreparedWorkload

LEAD_S = 0.3  # from "all ready" to the common start: every worker is asleep on the same deadline
STREAMS_PER_WORKER = 32


def default_workers(streams: int) -> int:
    """One worker per 32 streams, at most one per spare core (the coordinator and the OS keep one)."""
    spare = max(1, (os.cpu_count() or 1) - 1)
    return max(1, min(spare, math.ceil(streams / STREAMS_PER_WORKER)))


def loop_kind() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def shard(n: int, workers: int) -> list[list[int]]:
    """Round-robin: worker k gets k, k+K, k+2K, ... (streams that start together spread over the workers)."""
    return [list(range(k, n, workers)) for k in range(workers)]


def _context() -> mp.context.BaseContext:
    try:
        ctx = mp.get_context("forkserver")
    except ValueError:
        return mp.get_context("spawn")
    # Imported once in the fork server, not again in each child: a level's journal writer (and each worker) is up
    # in milliseconds instead of the seconds an import of the load client takes on a busy host.
    ctx.set_forkserver_preload(["offload_lab.load.share"])
    return ctx


def pin_plan(workers: int, reserved: set[int] | frozenset[int] = frozenset()) -> list[tuple[int, ...]] | None:
    """A CPU of its own for each of ``workers`` processes, from the CPUs this process may use less ``reserved`` (the
    token source's or server's), when there are enough of them; else None (the scheduler places them). A worker that
    shares its core waits in the run queue while a token arrives: that wait is the tail of the clock check."""
    free = sorted(os.sched_getaffinity(0) - set(reserved)) if hasattr(os, "sched_getaffinity") else []
    if workers < 1 or len(free) < workers:
        return None
    return [(cpu,) for cpu in free[:workers]]


def _worker_main(base_url: str, work: PreparedWorkload, cfg: ShareConfig, outcomes: Any, halt: Any, ready: Any,
                 go: Any, start_at: Any, out: str) -> None:
    if cfg.cpus:
        os.sched_setaffinity(0, set(cfg.cpus))
    endpoint = Endpoint(base_url)

    def report(ok: bool) -> bool:
        outcomes.put(ok)
        return halt.is_set()

    async def main() -> ShareResult:
        ready.put(cfg.worker)  # this worker's interpreter and loop are up
        await asyncio.to_thread(go.wait)  # the coordinator has written the start time
        return await run_share(endpoint, work, cfg, report, halt.is_set, start_at_ns=start_at.value)

    result = load.run_loop(main())
    result.health["loop"] = loop_kind()
    result.health["pid"] = os.getpid()
    result.health["cpus"] = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    Path(out).write_bytes(orjson.dumps({"events": result.events, "inflight": result.inflight,
                                        "health": result.health, "quick_mismatches": result.quick_mismatches}))


def _await_ready(ready: Any, procs: list[Any], timeout_s: float) -> None:
    """Wait for every worker's "ready", failing at once when one dies first (a bad import, a crash)."""
    deadline, waiting = time.monotonic() + timeout_s, len(procs)
    while waiting:
        try:
            ready.get(timeout=0.2)
            waiting -= 1
            continue
        except queue.Empty:
            pass
        dead = [p for p in procs if p.exitcode is not None]
        if dead:
            raise ProducerError(f"a load worker process exited before the start (exit {dead[0].exitcode}); a script "
                                "that runs levels on workers needs `if __name__ == '__main__':` around its code")
        if time.monotonic() > deadline:
            raise ProducerError(f"load worker processes were not ready within {timeout_s:.0f} s")


async def run_workers(endpoint: Endpoint, work: PreparedWorkload, configs: list[ShareConfig],
                      report: Callable[[bool], bool], timeout_s: float = 120.0) -> list[ShareResult]:
    """Run the shares on worker processes; ``report`` is the stop rule (True: halt every worker)."""
    ctx = _context()
    outcomes, halt = ctx.Queue(), ctx.Event()
    ready, go = ctx.Queue(), ctx.Event()
    start_at = ctx.Value("q", 0)
    done = threading.Event()

    def consume() -> None:
        # The stop rule for the whole level, in the order outcomes arrive.
        while not (done.is_set() and outcomes.empty()):
            try:
                ok = outcomes.get(timeout=0.05)
            except queue.Empty:
                continue
            if report(ok):
                halt.set()

    with tempfile.TemporaryDirectory(prefix="offload-lab-workers-") as tmp:
        files = [str(Path(tmp) / f"worker{c.worker}.json") for c in configs]
        procs = [ctx.Process(target=_worker_main, args=(endpoint.base_url, work, c, outcomes, halt, ready, go,
                                                        start_at, f), daemon=True) for c, f in zip(configs, files)]
        for p in procs:
            p.start()
        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        try:
            await asyncio.to_thread(_await_ready, ready, procs, timeout_s)
            start_at.value = time.monotonic_ns() + int(LEAD_S * 1e9)  # one start on the system-wide clock
            go.set()
            for p in procs:
                await asyncio.to_thread(p.join)
        except BaseException:
            halt.set()
            for p in procs:
                if p.is_alive():
                    p.terminate()
            raise
        finally:
            done.set()
            consumer.join(timeout=5)
        failed = [p for p in procs if p.exitcode != 0]
        if failed:
            raise ProducerError(f"{len(failed)} load worker process(es) failed (exit {failed[0].exitcode}); "
                                "rerun with --workers 1 to see the error in this process")
        results = []
        for c, f in zip(configs, files):
            data = orjson.loads(Path(f).read_bytes())
            results.append(ShareResult(worker=c.worker, events=data["events"],
                                       inflight=[tuple(x) for x in data["inflight"]], health=data["health"],
                                       quick_mismatches=data["quick_mismatches"]))
    return results
