"""Open-loop load: users arrive on their own schedule (Poisson or gamma gaps at a set rate), not when others finish.

Each request has an intended send time from the schedule (seeded) and an actual one. Latencies are reported both
from the send and from the schedule: the second is the coordinated-omission-corrected figure, which counts the time
a request waited because the client (a concurrency cap, or a late dispatcher) could not send it on time. A level
is *invalid as open loop* when its sends were late by more than ``max_send_late_ms`` at p99: then the client, not
the users, set the arrivals. The sweep's knee is the lowest offered rate at which the median per-stream tok/s falls
below the bar.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from offload_lab.core import stats
from offload_lab.load.share import ShareConfig

Arrival = Literal["poisson", "gamma", "constant"]
MAX_SEND_LATE_MS = 10.0


class OpenLoopParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rates_rps: list[float] = Field(min_length=1, description="offered request rates, in the order they run")
    requests: int = Field(40, ge=2, description="requests per rate (or rate x duration_s, if more)")
    duration_s: float = Field(0.0, ge=0, description="alternatively, seconds of arrivals per rate")
    arrival: Arrival = Field("poisson", description="arrival pattern: poisson, gamma or constant")
    burstiness: float = Field(1.0, gt=0, description="gamma shape: below 1 burstier than Poisson")
    seed: int = Field(0, description="schedule seed (rate k uses seed + k)")
    max_concurrency: int | None = Field(None, ge=1, description="client cap on requests in flight (None: none)")
    max_send_late_ms: float = Field(MAX_SEND_LATE_MS, gt=0)

    def count(self, rate: float) -> int:
        return max(self.requests, round(rate * self.duration_s))


def arrival_times_s(rate_rps: float, n: int, pattern: Arrival = "poisson", burstiness: float = 1.0,
                    seed: int = 0) -> np.ndarray:
    """Intended send times (s from the start, the first at 0) of n requests at a mean rate: Poisson (exponential
    gaps), gamma (shape ``burstiness``, scale 1/(rate x burstiness): the same mean) or constant. Seeded."""
    if rate_rps <= 0 or n < 1:
        raise ValueError("the rate must be positive and n at least 1")
    rng = np.random.default_rng(seed)
    if pattern == "constant":
        gaps = np.full(n, 1.0 / rate_rps)
    elif pattern == "poisson":
        gaps = rng.exponential(1.0 / rate_rps, n)
    elif pattern == "gamma":
        gaps = rng.gamma(burstiness, 1.0 / (rate_rps * burstiness), n)
    else:
        raise ValueError(f"unknown arrival pattern {pattern!r}")
    t = np.cumsum(gaps)
    return t - t[0]


def share_configs(schedule_s: np.ndarray, workers: int, level: int, max_concurrency: int | None,
                  extra: dict[str, Any] | None = None) -> list[ShareConfig]:
    """The schedule dealt by request index over the workers (a cap is split evenly, rounded up)."""
    k = max(1, min(workers, len(schedule_s)))
    cap = -(-max_concurrency // k) if max_concurrency else None
    return [ShareConfig(worker=w, schedule=[(i, int(schedule_s[i] * 1e9)) for i in range(w, len(schedule_s), k)],
                        max_concurrency=cap, level=level, extra=dict(extra or {})) for w in range(k)]


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize_rate(events: list[dict[str, Any]], rate: float, bar_tok_s: float,
                   max_send_late_ms: float = MAX_SEND_LATE_MS) -> dict[str, Any]:
    """One row per offered rate: achieved rate, per-stream tok/s, latencies from send and from schedule."""
    ok = [e for e in events if e.get("ok") and e.get("t_intended_ns") is not None]
    late = [(e["t_sent_ns"] - e["t_intended_ns"]) / 1e6 for e in ok]
    ttft_send = [e["ttft_s"] * 1e3 for e in ok if e.get("ttft_s") is not None]
    ttft_sched = [(e["t_first_token_ns"] - e["t_intended_ns"]) / 1e6 for e in ok if e.get("t_first_token_ns")]
    e2e_send = [e["e2e_s"] * 1e3 for e in ok if e.get("e2e_s") is not None]
    e2e_sched = [(e["t_end_ns"] - e["t_intended_ns"]) / 1e6 for e in ok if e.get("t_end_ns")]
    sent = sorted(e["t_sent_ns"] for e in ok)
    span_s = (sent[-1] - sent[0]) / 1e9 if len(sent) > 1 else 0.0
    tok = stats.summarize([e.get("tok_s") for e in ok])
    late_p99 = _pct(late, 99)
    return {
        "rate_rps": rate, "requests": len(events), "ok": len(ok), "errors": len(events) - len(ok),
        "achieved_rps": (len(sent) - 1) / span_s if span_s > 0 else None,
        "tok_s_median": tok["median"], "tok_s_p5": tok["p5"],
        "holds_bar": bool(tok["median"] is not None and tok["median"] >= bar_tok_s),
        "send_late_ms_p50": _pct(late, 50), "send_late_ms_p99": late_p99,
        "ttft_ms_p50_send": _pct(ttft_send, 50), "ttft_ms_p50_sched": _pct(ttft_sched, 50),
        "ttft_ms_p99_send": _pct(ttft_send, 99), "ttft_ms_p99_sched": _pct(ttft_sched, 99),
        "e2e_ms_p50_send": _pct(e2e_send, 50), "e2e_ms_p50_sched": _pct(e2e_sched, 50),
        "e2e_ms_p99_send": _pct(e2e_send, 99), "e2e_ms_p99_sched": _pct(e2e_sched, 99),
        "valid_open_loop": bool(late_p99 is not None and late_p99 <= max_send_late_ms),
    }


def knee(rows: list[dict[str, Any]], bar_tok_s: float) -> float | None:
    """The lowest offered rate whose median per-stream tok/s is below the bar (None when every rate holds it)."""
    below = [r["rate_rps"] for r in sorted(rows, key=lambda r: r["rate_rps"])
             if r.get("tok_s_median") is not None and r["tok_s_median"] < bar_tok_s]
    return below[0] if below else None


def omission_gap(row: dict[str, Any]) -> dict[str, float | None]:
    """How much a send-based latency hides at one rate: schedule-based minus send-based, p50 and p99 (ms)."""
    def gap(a: str, b: str) -> float | None:
        return None if row.get(a) is None or row.get(b) is None else row[a] - row[b]

    return {"ttft_ms_p50_gap": gap("ttft_ms_p50_sched", "ttft_ms_p50_send"),
            "ttft_ms_p99_gap": gap("ttft_ms_p99_sched", "ttft_ms_p99_send"),
            "e2e_ms_p99_gap": gap("e2e_ms_p99_sched", "e2e_ms_p99_send")}
