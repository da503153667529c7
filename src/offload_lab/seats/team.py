"""A team of developers whose chances of generating differ: the number generating at once is Poisson-binomial (a sum
of independent Bernoulli(q_i)), computed exactly by convolution; streams and pods for it under the seat rule."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from offload_lab.core.errors import InputError


def _check(qs: Sequence[float]) -> np.ndarray:
    q = np.asarray(list(qs), dtype=float)
    if q.size == 0:
        raise InputError("a team needs at least one developer's q")
    if not np.all((q > 0) & (q <= 1)):
        raise InputError(f"every developer's q must be in (0, 1]; got {sorted(set(q.round(6).tolist()))[:5]}")
    return q


def pmf(qs: Sequence[float]) -> np.ndarray:
    """P(X = k), k = 0..n, for X the number of developers generating at once (exact convolution)."""
    q = _check(qs)
    out = np.zeros(q.size + 1)
    out[0] = 1.0
    for i, qi in enumerate(q):
        out[1:i + 2] = out[1:i + 2] * (1 - qi) + out[:i + 1] * qi
        out[0] *= 1 - qi
    return out


def sf(s: int, qs: Sequence[float]) -> float:
    """P(X > s)."""
    p = pmf(qs)
    return float(p[s + 1:].sum()) if s + 1 < p.size else 0.0


def streams_needed(qs: Sequence[float], alpha: float) -> int:
    """The fewest streams s with P(X > s) <= alpha."""
    if not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1); got {alpha!r}")
    tail = np.cumsum(pmf(qs)[::-1])[::-1]  # tail[k] = P(X >= k)
    for s in range(tail.size):
        if (tail[s + 1] if s + 1 < tail.size else 0.0) <= alpha:
            return s
    return tail.size - 1


def pods_needed(qs: Sequence[float], streams_per_pod: int, alpha: float) -> int:
    if streams_per_pod < 1:
        raise InputError("a pod serves at least one stream")
    return math.ceil(streams_needed(qs, alpha) / streams_per_pod)
