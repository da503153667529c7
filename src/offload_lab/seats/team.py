"""A team of developers whose chances of generating differ: the number generating at once is Poisson-binomial (a sum
of independent Bernoulli(q_i)), computed exactly by convolution; streams and pods for it under the seat rule.

Correlated demand on top (``rho`` > 0): a shared factor moves the whole team together (deadlines, release days).
Each day the team's level B is drawn from a Beta with mean q̄ (the team's mean q) and intra-team correlation ρ, and
developer i then generates with chance min(1, q_i · B / q̄): everyone busier on a busy day, in proportion to their
own q. With equal q this is exactly the beta-binomial of :class:`offload_lab.seats.capacity.Demand`; with ρ = 0 it is
the Poisson-binomial. The count's law is the Poisson-binomial averaged over B, integrated by Gauss-Jacobi quadrature
(the Beta density is the Jacobi weight, so the integral of the pmf, a polynomial of degree n in B, is exact with
n/2 + 1 nodes wherever no developer's chance reaches 1). :func:`simulate` draws days and developers instead, the
check that the integral is the model; the cap at 1 (a developer whose q_i · B / q̄ would exceed 1) loses a little
mean on the busiest days and is the only place the two differ from "every q scaled".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import special

from offload_lab.core.errors import InputError


def _check(qs: Sequence[float]) -> np.ndarray:
    q = np.asarray(list(qs), dtype=float)
    if q.size == 0:
        raise InputError("a team needs at least one developer's q")
    if not np.all((q > 0) & (q <= 1)):
        raise InputError(f"every developer's q must be in (0, 1]; got {sorted(set(q.round(6).tolist()))[:5]}")
    return q


def _convolve(p: np.ndarray) -> np.ndarray:
    """Poisson-binomial pmfs of each row of chances ``p`` (rows, n) -> (rows, n + 1), by convolution."""
    out = np.zeros((p.shape[0], p.shape[1] + 1))
    out[:, 0] = 1.0
    for i in range(p.shape[1]):
        pi = p[:, i:i + 1]
        out[:, 1:i + 2] = out[:, 1:i + 2] * (1 - pi) + out[:, :i + 1] * pi
        out[:, 0] *= 1 - p[:, i]
    return out


def _check_rho(rho: float) -> float:
    if not 0 <= rho < 1:
        raise InputError(f"the intra-team correlation rho must be in [0, 1); got {rho!r}")
    return float(rho)


def day_levels(qs: Sequence[float], rho: float, nodes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The team's day levels B and their weights: Gauss-Jacobi nodes of Beta(q̄ k, (1 - q̄) k), k = (1 - ρ) / ρ
    (one level, q̄, with weight 1 when ρ = 0)."""
    q = _check(qs)
    mean = float(q.mean())
    if _check_rho(rho) == 0 or mean >= 1:
        return np.array([mean]), np.array([1.0])
    k = (1 - rho) / rho
    a, b = mean * k, (1 - mean) * k
    # Beta(a, b) on [0, 1] is the Jacobi weight (1 - t)^(b - 1) (1 + t)^(a - 1) on [-1, 1], with B = (1 + t) / 2.
    t, w = special.roots_jacobi(nodes or max(64, q.size + 2), b - 1, a - 1)
    return (1 + t) / 2, w / w.sum()


def pmf(qs: Sequence[float], rho: float = 0.0, nodes: int | None = None) -> np.ndarray:
    """P(X = k), k = 0..n, for X the number of developers generating at once: exact convolution, averaged over the
    day level when ``rho`` > 0 (see the module)."""
    q = _check(qs)
    levels, weights = day_levels(q, rho, nodes)
    chances = np.minimum(1.0, q[None, :] * (levels[:, None] / q.mean()))
    return weights @ _convolve(chances)


def sf(s: int, qs: Sequence[float], rho: float = 0.0) -> float:
    """P(X > s)."""
    p = pmf(qs, rho)
    return float(p[s + 1:].sum()) if s + 1 < p.size else 0.0


def streams_needed(qs: Sequence[float], alpha: float, rho: float = 0.0) -> int:
    """The fewest streams s with P(X > s) <= alpha."""
    if not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1); got {alpha!r}")
    tail = np.cumsum(pmf(qs, rho)[::-1])[::-1]  # tail[k] = P(X >= k)
    for s in range(tail.size):
        if (tail[s + 1] if s + 1 < tail.size else 0.0) <= alpha:
            return s
    return tail.size - 1


def pods_needed(qs: Sequence[float], streams_per_pod: int, alpha: float, rho: float = 0.0) -> int:
    if streams_per_pod < 1:
        raise InputError("a pod serves at least one stream")
    return math.ceil(streams_needed(qs, alpha, rho) / streams_per_pod)


@dataclass(frozen=True)
class TeamSimulation:
    """Share of simulated moments with k = 0..n generating, and the spread of the tail between days."""

    distribution: np.ndarray
    day_counts: np.ndarray  # (days, n + 1) moments with k generating, per day

    def overflow_probability(self, streams: int) -> float:
        return float(self.distribution[streams + 1:].sum())

    def overflow_standard_error(self, streams: int) -> float:
        """From the spread between days (days are independent)."""
        d = self.day_counts[:, streams + 1:].sum(axis=1) / self.day_counts.sum(axis=1)
        return float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else float("nan")

    def streams_needed(self, alpha: float) -> int:
        tail = np.cumsum(self.distribution[::-1])[::-1]
        return next(s for s in range(tail.size) if (tail[s + 1] if s + 1 < tail.size else 0.0) <= alpha)


def simulate(qs: Sequence[float], rho: float, days: int, moments_per_day: int, seed: int = 0) -> TeamSimulation:
    """Draw ``days`` day levels from the Beta and, at ``moments_per_day`` independent moments of each, whether each
    developer generates: the model of the module by sampling, to check its integral (seeded, reproducible)."""
    q = _check(qs)
    if days < 1 or moments_per_day < 1:
        raise InputError("the simulation needs at least one day and one moment a day")
    rng = np.random.default_rng(seed)
    mean = float(q.mean())
    if _check_rho(rho) == 0 or mean >= 1:
        level = np.full(days, mean)
    else:
        k = (1 - rho) / rho
        level = rng.beta(mean * k, (1 - mean) * k, size=days)
    counts = np.zeros((days, q.size + 1), dtype=np.int64)
    for d in range(days):
        chance = np.minimum(1.0, q * level[d] / mean)
        generating = (rng.random((moments_per_day, q.size)) < chance).sum(axis=1)
        counts[d] = np.bincount(generating, minlength=q.size + 1)
    return TeamSimulation(counts.sum(axis=0) / counts.sum(), counts)
