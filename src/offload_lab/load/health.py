"""Whether the load client could have moved a level's figures: a verdict founded on measured error, not on lag alone.

The old rule flagged a level when the client's loop lag p99 passed a tenth of the TPOT it measured. It cried wolf
(raised in every run, lag p99 1.1 to 1.4 ms against a TPOT of 4 to 9 ms, while TPOT matched the server's own
histograms within 0.3%): a constant delay cancels out of TPOT and tok/s, which only the *difference* of the stamp
errors between a request's last and first tokens moves.

Calibration: ``offload-lab clock-check`` measures the same client (its worker count, deferred parsing) against the
calibrated token source and records, per level, the client's own median rate error (its tok/s over the rate the
source's send stamps give, minus one: any lateness of the source itself drops out), the first-token error and the
loop lag there. The load is taken per worker process: token chunks a second it stamps (streams per worker times
tokens a second per stream).

Verdict for a real level: its load per worker from its own median TPOT, the calibrated errors interpolated there
(log-log, on a conservative envelope: the worst point at each load, then a running maximum over load; above the
largest calibrated load the verdict is ``uncalibrated``), and ``flag`` only when the client's
contribution could move a reported figure by more than the tolerance: median tok/s and TPOT by more than
``tol_rate`` (0.5%), median TTFT by more than ``tol_ttft`` (1%) and 0.5 ms (below that, the first-token error is the
loopback and the kernel's wake-up, which every client pays alike). A level is also flagged when a worker's live lag
p99 is over three times the calibrated lag at that load, or a worker used more than 0.8 of a core: the machine was
busier than when it was calibrated.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from offload_lab.core import runs

TOL_RATE = 0.005
TOL_TTFT = 0.01
# Below this, a first-token error is the loopback and the kernel's wake-up, which every client pays alike.
TOL_TTFT_FLOOR_MS = 0.5
LAG_FACTOR = 3.0
CPU_LIMIT = 0.8
CALIBRATION_CAMPAIGN = "bench"
CALIBRATION_EXPERIMENT = "clock_check"


class CalPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chunks_per_worker_s: float
    rate_error: float  # |client-only median rate error|
    first_token_error_ms: float  # p50 of (first arrival - first send)
    lag_ms_p99: float


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str  # the clock-check run it came from
    points: list[CalPoint]


def calibration_from_summary(summary: pd.DataFrame, source: str, inline: bool = False) -> Calibration:
    """Points from a clock-check summary (one row per level and client configuration), from the configurations
    that parse as the sweep does (deferred, or ``inline``)."""
    pts = []
    for _, r in summary.iterrows():
        if pd.isna(r.get("client_rate_error_median")):
            continue
        if str(r.get("client", "w1")).endswith("-inline") != inline:
            continue
        workers = int(r.get("workers") or 1)
        pts.append(CalPoint(chunks_per_worker_s=float(r["streams"]) / workers * float(r["rate_tok_s"]),
                            rate_error=abs(float(r["client_rate_error_median"])),
                            first_token_error_ms=float(r["first_token_error_ms_p50"]),
                            lag_ms_p99=float(r["lag_ms_p99"] or 0.0)))
    pts.sort(key=lambda p: p.chunks_per_worker_s)
    return Calibration(source=source, points=pts)


def find_calibration(data_root: Path | str, inline: bool = False) -> Calibration | None:
    """The newest ok clock-check run under ``data_root`` (campaign ``bench``), or None."""
    run_dir = runs.latest_run(data_root, CALIBRATION_CAMPAIGN, CALIBRATION_EXPERIMENT)
    if run_dir is None or not (Path(run_dir) / "summary.csv").is_file():
        return None
    summary = pd.read_csv(Path(run_dir) / "summary.csv")
    if "client_rate_error_median" not in summary.columns:
        return None  # a clock check from before the client-only error was recorded
    cal = calibration_from_summary(summary, str(Path(run_dir).name), inline)
    return cal if cal.points else None


def _envelope(points: list[CalPoint], key: str) -> list[tuple[float, float]]:
    """The calibrated error against load, made conservative: the worst of the points at one load, then a running
    maximum (a client's own error does not fall as its load grows; where a measurement says so, it is noise)."""
    worst: dict[float, float] = {}
    for p in points:
        worst[p.chunks_per_worker_s] = max(worst.get(p.chunks_per_worker_s, 0.0), getattr(p, key), 1e-9)
    out, top = [], 0.0
    for x in sorted(worst):
        top = max(top, worst[x])
        out.append((x, top))
    return out


def _interp(points: list[CalPoint], x: float, key: str) -> float:
    """Log-log interpolation of the calibrated error envelope at load x (clamped below the first point)."""
    xy = _envelope(points, key)
    if x <= xy[0][0]:
        return xy[0][1]
    for (x0, y0), (x1, y1) in zip(xy, xy[1:]):
        if x <= x1:
            f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
    return xy[-1][1]


def verdict(cal: Calibration | None, *, streams: int, workers: list[dict[str, Any]], tpot_ms: float | None,
            ttft_ms: float | None, tol_rate: float = TOL_RATE, tol_ttft: float = TOL_TTFT) -> dict[str, Any]:
    """``ok``, ``flag`` (with reasons) or ``uncalibrated``, and the bounds the calibration gives at this load."""
    if cal is None or not cal.points:
        return {"verdict": "uncalibrated", "reasons": ["no clock-check calibration found"]}
    if not tpot_ms or not ttft_ms:
        return {"verdict": "uncalibrated", "reasons": ["the level has no TPOT or TTFT to judge"]}
    k = max(1, len(workers))
    x = streams / k * 1000.0 / tpot_ms
    out: dict[str, Any] = {"calibration": cal.source, "chunks_per_worker_s": round(x, 1)}
    if x > cal.points[-1].chunks_per_worker_s * 1.05:
        return {**out, "verdict": "uncalibrated",
                "reasons": [(f"load {x:.0f} chunks/s per worker is above the calibrated "
                             f"{cal.points[-1].chunks_per_worker_s:.0f}; run clock-check at more streams")]}
    rate_err = _interp(cal.points, x, "rate_error")
    ttft_err = _interp(cal.points, x, "first_token_error_ms") / ttft_ms
    lag_cal = _interp(cal.points, x, "lag_ms_p99")
    reasons = []
    if rate_err > tol_rate:
        reasons.append(f"client rate error {rate_err:.2%} > {tol_rate:.1%}")
    if ttft_err > tol_ttft and ttft_err * ttft_ms > TOL_TTFT_FLOOR_MS:
        reasons.append(f"client TTFT error {ttft_err:.2%} ({ttft_err * ttft_ms:.2f} ms) > {tol_ttft:.0%} "
                       f"and {TOL_TTFT_FLOOR_MS} ms")
    lag = max((w.get("lag_ms_p99") or 0.0) for w in workers) if workers else 0.0
    cpu = max((w.get("cpu_util") or 0.0) for w in workers) if workers else 0.0
    if lag > LAG_FACTOR * max(lag_cal, 0.5) or cpu > CPU_LIMIT:
        reasons.append(f"busier than calibrated (lag p99 {lag:.1f} ms against {lag_cal:.1f}, cpu {cpu:.2f} core)")
    return {**out, "verdict": "flag" if reasons else "ok", "reasons": reasons,
            "client_rate_error_bound": rate_err, "client_ttft_error_bound": ttft_err}
