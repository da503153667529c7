"""Run the cached-prefix experiment: ``users`` closed-loop streams whose prompts share one long prefix.

The prefix is primed once (the load generator's ``shared_prefix`` regime checks every request's cached tokens
against it), then every user sends ``requests_per_user`` requests of prefix + own suffix. What the study reports is
the tail of time to first token (p95: how long the unluckiest user waits on a cached context) and the median time per
output token while the users decode together.
"""

from __future__ import annotations

from typing import Any

from offload_lab.core import runs
from offload_lab.experiments.cached_prefix.params import Params
from offload_lab.experiments.cached_prefix.tables import LEVELS, SUMMARY
from offload_lab.load import sweep
from offload_lab.load.workloads import WorkloadSpec


def sweep_params(params: Params) -> sweep.SweepParams:
    workload = WorkloadSpec(regime="shared_prefix", prefix_tokens=params.prefix_tokens,
                            suffix_tokens=params.suffix_tokens, output_tokens=params.output_tokens)
    return sweep.SweepParams(workload=workload, streams=[params.users], requests_per_stream=params.requests_per_user,
                             stop_rule=params.stop_rule)


def run_experiment(run: runs.Run, url: str, params: Params) -> dict[str, Any]:
    """Measure one level of ``users`` streams; write ``levels.csv`` and ``summary.json``; return the summary."""
    sweep.run_sweep(run, url, sweep_params(params), progress=None)
    level = _first_level(run)
    summary = {
        "users": int(level["streams"]), "requests_ok": int(level["ok_in_window"]),
        "ttft_p95_s": _num(level["ttft_p95_s"]), "ttft_median_s": _num(level["ttft_median_s"]),
        "tpot_median_ms": _num(level["tpot_median_ms"]), "cache_checked": int(level["cache_checked"]),
        "cache_misses": int(level["cache_misses"]), "prefix_tokens": params.prefix_tokens,
    }
    run.write_json(SUMMARY, summary)
    return summary


def _first_level(run: runs.Run) -> Any:
    import pandas as pd

    return pd.read_csv(run.file(LEVELS)).iloc[0]


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None
