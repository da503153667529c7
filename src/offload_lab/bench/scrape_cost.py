"""What one ``/metrics`` scrape costs the server, so that the load generator's own scraping is kept off its
critical path (AIPerf scrapes three times a second; on a 2-core server each scrape cost 7 to 15 ms of server CPU).

Method: the server's process tree (the API server and its engine processes, from ``/proc``) is first watched idle for
``idle_s`` to get its background CPU rate; then ``scrapes`` back-to-back ``GET /metrics`` are timed on the client.
The CPU per scrape is the tree's CPU over the scrapes, less the idle rate over the same time, divided by their
number. Linux only (``/proc``); elsewhere the CPU columns are None.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from offload_lab.load.endpoint import Endpoint

EXPERIMENT = "scrape_cost"


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            kids.append(int(d.name))
    return kids


def tree_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process and all its descendants (None without /proc)."""
    total, todo, seen = 0.0, [pid], set()
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            if p == pid:
                return None
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
        todo += _children(p)
    return total


def measure(endpoint: Endpoint, server_pid: int | None, scrapes: int = 50, idle_s: float = 3.0) -> dict[str, Any]:
    """Client wall time per scrape (ms) and the server's CPU per scrape (ms), with the scrape's size."""
    idle_rate = None
    if server_pid is not None:
        c0, t0 = tree_cpu_s(server_pid), time.monotonic()
        time.sleep(idle_s)
        c1, t1 = tree_cpu_s(server_pid), time.monotonic()
        idle_rate = (c1 - c0) / (t1 - t0) if c0 is not None and c1 is not None else None
    walls, size = [], 0
    c0, t0 = (tree_cpu_s(server_pid) if server_pid is not None else None), time.monotonic()
    with endpoint.sync_client(30.0) as http:
        for _ in range(scrapes):
            s = time.monotonic_ns()
            r = http.get(endpoint.url("/metrics"))
            walls.append((time.monotonic_ns() - s) / 1e6)
            size = len(r.content)
    c1, t1 = (tree_cpu_s(server_pid) if server_pid is not None else None), time.monotonic()
    cpu_ms = None
    if c0 is not None and c1 is not None and idle_rate is not None:
        cpu_ms = max(0.0, (c1 - c0) - idle_rate * (t1 - t0)) / scrapes * 1e3
    return {"scrapes": scrapes, "bytes": size, "wall_ms_p50": float(np.median(walls)),
            "wall_ms_p99": float(np.percentile(walls, 99)), "server_cpu_ms_per_scrape": cpu_ms,
            "server_idle_cores": idle_rate,
            # What a scraper at rate f costs the server, as a share of one core.
            "server_core_share_at_1hz": cpu_ms / 1e3 if cpu_ms is not None else None,
            "server_core_share_at_3hz": 3 * cpu_ms / 1e3 if cpu_ms is not None else None}
