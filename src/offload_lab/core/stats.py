"""Summary statistics as the study reports them: median, p5, p95, p99 (where the sample allows), with counts."""

from __future__ import annotations

from typing import Iterable

import numpy as np

# Below this many samples a p99 is just the maximum; report it only when it means something.
P99_MIN_SAMPLES = 100


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
