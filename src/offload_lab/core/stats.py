"""Summary statistics as the study reports them: median, p5, p95, p99 (where the sample allows), with counts."""

from __future__ import annotations

from typing import Iterable

import numpy as np

# Below this many samples a p99 is just the maximum; report it only when it means something.
P99_MIN_SAMPLES = 100
# The same reasoning for every percentile a report or the explore notebook shows: below 20 samples a p95 is the
# largest value or next to it. summarize() keeps its p95 (the paper's tables cite it); readers ask `supports`.
P95_MIN_SAMPLES = 20
MIN_SAMPLES = {95: P95_MIN_SAMPLES, 99: P99_MIN_SAMPLES}


def supports(q: float, n: int) -> bool:
    """Whether ``n`` samples support reporting the ``q``-th percentile: a tail percentile (p5 as much as p95) needs
    as many samples as its upper twin; the median always may be reported."""
    tail = max(q, 100 - q)
    need = max((m for p, m in MIN_SAMPLES.items() if tail >= p), default=1)
    return n >= need


def summarize(values: Iterable[float | None], prefix: str = "") -> dict[str, float | int | None]:
    """Median, p5, p95, p99 and count of the finite values; NaN/None are dropped and counted apart."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    finite = arr[np.isfinite(arr)]
    n = int(finite.size)
    out: dict[str, float | int | None] = {f"{prefix}n": n, f"{prefix}dropped": int(arr.size - n)}
    if n == 0:
        for k in ("median", "p5", "p95", "p99", "mean", "min", "max"):
            out[f"{prefix}{k}"] = None
        return out
    p5, p50, p95, p99 = np.percentile(finite, [5, 50, 95, 99])
    out.update({
        f"{prefix}median": float(p50),
        f"{prefix}p5": float(p5),
        f"{prefix}p95": float(p95),
        f"{prefix}p99": float(p99) if n >= P99_MIN_SAMPLES else None,
        f"{prefix}mean": float(finite.mean()),
        f"{prefix}min": float(finite.min()),
        f"{prefix}max": float(finite.max()),
    })
    return out
