"""An open-loop sweep: for each offered rate, a seeded Poisson (or gamma) schedule of fresh requests, sent on time
by the worker processes; per rate the achieved rate, per-stream tok/s, TTFT and E2E from the send and from the
schedule, send lateness; then the knee (:mod:`offload_lab.load.open_loop`).

``events.jsonl`` (one line per request, with ``t_intended_ns``, and one ``level`` line per rate) and ``rates.csv``
(one row per rate), ``knee.json``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.load import client as load
from offload_lab.load import closed_loop, open_loop, sweep, workers, workloads
from offload_lab.load.bar import BAR_TOK_S
from offload_lab.load.endpoint import Endpoint
from offload_lab.core.runs import EVENTS

EXPERIMENT = "open_loop"
RATES = "rates.csv"
KNEE = "knee.json"


def run_rates(run: runs.Run, base_url: str | Endpoint, spec: workloads.WorkloadSpec, params: open_loop.OpenLoopParams,
              bar_tok_s: float = BAR_TOK_S, n_workers: int | None = None, model: str | None = None,
              stop_rule: closed_loop.StopRule | None = None, progress: Any = print) -> pd.DataFrame:
    if spec.regime == "agent_turns":
        raise InputError("open-loop load sends independent requests; agent_turns needs closed-loop streams")
    endpoint = Endpoint.of(base_url)
    model = model or endpoint.first_model()
    stop = closed_loop.StopState(stop_rule or closed_loop.StopRule())
    rows = []
    with run.events(EVENTS) as log:
        for k, rate in enumerate(params.rates_rps):
            n = params.count(rate)
            # One "stream" per request, one request each: every prompt fresh, built before the clock starts.
            work = workloads.prepare(spec, endpoint.base_url, model, n, 1, salt=f"{run.run_id}/open/{rate}")
            schedule = open_loop.arrival_times_s(rate, n, params.arrival, params.burstiness, params.seed + k)
            kw = n_workers or workers.default_workers(params.max_concurrency or n)
            extra = {"rate_rps": rate}
            configs = open_loop.share_configs(schedule, kw, n, params.max_concurrency, extra)
            result = load.run_sync(closed_loop.run_level(endpoint, work, stop, log, None, extra=extra,
                                                         configs=configs))
            row = open_loop.summarize_rate(result.events, rate, bar_tok_s, params.max_send_late_ms)
            row.update(workers=len(result.workers), lag_ms_p99=result.lag.get("lag_ms_p99"),
                       worker_cpu_max=max((w.get("cpu_util") or 0.0) for w in result.workers),
                       **open_loop.omission_gap(row))
            rows.append(row)
            log.append({"kind": "level", "level": n, **extra, "stopped": result.stopped, "workers": result.workers})
            if progress:
                progress(f"open loop: {rate:g} req/s done ({row['ok']}/{n} ok)")
            if result.stopped:
                break
    table = pd.DataFrame(rows)
    run.write_table(RATES, table)
    run.write_json(KNEE, {"bar_tok_s": bar_tok_s, "knee_rps": open_loop.knee(rows, bar_tok_s),
                          "max_concurrency": params.max_concurrency, "stopped": stop.reason})
    failed = [r["rate_rps"] for r in rows if not r["ok"]]
    if stop.reason or failed:
        # A rate where no request succeeded measured nothing: the run is not `ok`, whatever the table says.
        why = stop.reason or f"no request succeeded at {', '.join(f'{r:g}' for r in failed)} req/s"
        raise sweep.SweepStopped(f"open loop: {why} ({stop.errors} of {stop.requests} requests failed); what was "
                                 f"measured is kept in {run.path}")
    return table
