"""Seats, pods and the gap between volume and concurrency.

A pod serves ``S`` streams at the bar (a median of 40 output tokens/s per stream in the study). A developer whose
agent is generating needs one of them *now*, while the person waits; ``q`` (see :mod:`offload_lab.seats.profile`) is
the chance of that at a moment of the working window. The seat rule: a pool of ``s`` streams serves a team of ``n``
when P(more than ``s`` of the ``n`` generate at once) ≤ α.

Three models of how many generate at once, from the most optimistic up:

* **Binomial(n, q)**: developers independent (the study's model). Right for a team spread over time zones and
  projects with no common rhythm; optimistic for a team that works to one schedule.
* **Beta-binomial(n, q, ρ)**: each day (or hour) the whole team's ``q`` moves together, drawn from a Beta with mean
  ``q``; ρ is the intra-team correlation, the correlation between two developers' "generating now". ρ = 0 is the
  binomial. Use it when a shared factor (deadlines, release days, one stand-up) moves everyone; ρ has to come from
  the team's own data (the variance of its daily usage), and the results show how fast seats fall as it grows.
* **A simulation** of sessions and agent turns over days (:mod:`offload_lab.seats.simulation`): it agrees with
  the closed forms where their assumptions hold, and goes further (sessions, a shared daily schedule, how long an
  overload lasts). Trust it for those questions; for the tail probability at α = 1% prefer the closed form, whose
  answer has no sampling error, unless the simulated days are many.

Pods: a team's developers share every pod's streams (a router sends a turn to any pod with a free stream), so
``pods = ceil(streams needed / S)``. Pinning each developer to one pod (sticky sessions keep their prefix cache)
instead needs ``ceil(n / seats per pod)`` pods; both are reported.

Seats by volume, beside them: a pod's output rate over a month against one developer's monthly output, at full and
at half utilization. The ratio of the two is the study's central gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy import stats

from offload_lab.core.errors import InputError
from offload_lab.seats.profile import ProfileTiming, UsageProfile, load_profile, output_tokens_per_hour_of_period, parse_profile, profile_timing

# A search for the largest team gives up here: above it the rule is met by any team a pod could be sold to.
N_MAX = 10_000_000


@dataclass(frozen=True)
class Demand:
    """How many of ``n`` developers generate at once.

    ``rho`` = 0 and no ``shape``: Binomial(n, q). ``rho`` > 0: beta-binomial with mean ``q`` and intra-team
    correlation ``rho``. ``shape``: the window split into equal parts (hours, say) whose ``q`` differ in these
    proportions (a team on one schedule); developers are independent within a part, so the count is a mixture of
    binomials. ``rho`` and ``shape`` together have no closed form here; simulate them.
    """

    q: float
    rho: float = 0.0
    shape: tuple[float, ...] | None = field(default=None)

    def __post_init__(self) -> None:
        if not (0 < self.q <= 1):
            raise InputError(f"q must be in (0, 1], the chance a developer is generating; got {self.q!r}")
        if not (0 <= self.rho < 1):
            raise InputError(f"the intra-team correlation rho must be in [0, 1); got {self.rho!r}")
        if self.shape is not None:
            if self.rho > 0:
                raise InputError("give rho or a schedule shape, not both: no closed form combines them (simulate)")
            if len(self.shape) == 0 or any(not (w >= 0) for w in self.shape) or sum(self.shape) <= 0:
                raise InputError(f"a schedule shape needs non-negative weights with a positive sum; got {self.shape}")
            if max(self.part_q()) > 1:
                raise InputError(
                    f"q = {self.q} under shape {self.shape} exceeds 1 in its busiest part; flatten the shape"
                )

    @property
    def model(self) -> str:
        if self.shape is not None:
            return "binomial-mixture"
        return "beta-binomial" if self.rho > 0 else "binomial"

    def beta_params(self) -> tuple[float, float]:
        """Beta(a, b) with mean q and ρ = 1 / (a + b + 1)."""
        k = (1.0 - self.rho) / self.rho
        return self.q * k, (1.0 - self.q) * k

    def part_q(self) -> list[float]:
        assert self.shape is not None
        mean = sum(self.shape) / len(self.shape)
        return [self.q * w / mean for w in self.shape]

    def sf(self, s: int | np.ndarray, n: int | np.ndarray) -> np.ndarray | float:
        """P(X > s) for X developers of ``n`` generating at once; broadcasts over ``s`` and ``n``."""
        s_arr, n_arr = np.asarray(s), np.asarray(n)
        if self.shape is not None:
            parts = [stats.binom.sf(s_arr, n_arr, qh) for qh in self.part_q()]
            out = np.mean(parts, axis=0)
        elif self.rho > 0:
            a, b = self.beta_params()
            out = stats.betabinom.sf(s_arr, n_arr, a, b)
        else:
            out = stats.binom.sf(s_arr, n_arr, self.q)
        # n = 0 and s >= n both give 0; scipy agrees, but make it exact rather than rounding noise.
        out = np.where(s_arr >= n_arr, 0.0, out)
        return float(out) if out.ndim == 0 else out

    def pmf(self, k: np.ndarray | int, n: int) -> np.ndarray:
        if self.shape is not None:
            return np.mean([stats.binom.pmf(k, n, qh) for qh in self.part_q()], axis=0)
        if self.rho > 0:
            a, b = self.beta_params()
            return stats.betabinom.pmf(k, n, a, b)
        return stats.binom.pmf(k, n, self.q)


def _check_alpha(alpha: float) -> None:
    if not (0 < alpha < 1):
        raise InputError(f"alpha, the accepted chance of more developers generating than streams, must be in (0, 1); "
                         f"got {alpha!r}")


def _check_count(name: str, value: int, minimum: int = 0) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise InputError(f"{name} must be a whole number ≥ {minimum}; got {value!r}")
    return int(value)


def overflow_probability(n: int, streams: int, demand: Demand) -> float:
    """P(more than ``streams`` of ``n`` developers generate at once)."""
    return float(demand.sf(_check_count("streams", streams), _check_count("team size", n)))


def seats_for_streams(streams: int, demand: Demand, alpha: float, n_max: int = N_MAX) -> int:
    """The largest team ``n`` with P(X_n > streams) ≤ alpha.

    P(X_n > s) grows with n (one more developer can only add to the count), so a doubling search followed by
    bisection finds the boundary with O(log n) tail evaluations.
    """
    streams = _check_count("streams", streams)
    _check_alpha(alpha)
    lo = streams  # P(X > s) = 0 for n <= s: always served
    hi = max(2 * streams, streams + 1)
    while demand.sf(streams, hi) <= alpha:
        lo, hi = hi, 2 * hi
        if lo > n_max:
            raise InputError(f"more than {n_max:,} developers fit in {streams} streams at q={demand.q}, "
                             f"alpha={alpha}; q is too small for this search")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if demand.sf(streams, mid) <= alpha:
            lo = mid
        else:
            hi = mid
    return lo


def streams_for_teams(ns: Sequence[int] | np.ndarray, demand: Demand, alpha: float) -> np.ndarray:
    """For each team size, the fewest streams ``s`` with P(X > s) ≤ alpha (0 for an empty team).

    A bisection over ``s`` run for every team at once: P(X > s) falls as ``s`` grows, P(X > n) = 0, and the tails
    themselves decide each step (no quantile function and its rounding in between). About log2(n) passes.
    """
    _check_alpha(alpha)
    n = np.asarray(ns, dtype=np.int64)
    if n.size and n.min() < 0:
        raise InputError("team sizes must not be negative")
    lo = np.full(n.shape, -1, dtype=np.int64)  # invariant: the rule fails at lo (no streams fail any team)
    hi = n.copy()  # invariant: the rule holds at hi (P(X > n) = 0)
    while True:
        open_ = hi - lo > 1
        if not open_.any():
            break
        mid = (lo + hi) // 2
        ok = np.asarray(demand.sf(np.maximum(mid, 0), n)) <= alpha
        hi = np.where(open_ & ok, mid, hi)
        lo = np.where(open_ & ~ok, mid, lo)
    return hi


def streams_for_team(n: int, demand: Demand, alpha: float) -> int:
    return int(streams_for_teams([_check_count("team size", n)], demand, alpha)[0])


def pods_for_teams(ns: Sequence[int] | np.ndarray, streams_per_pod: int, demand: Demand, alpha: float) -> np.ndarray:
    """Pods whose pooled streams serve each team under the rule; a team of one or more always gets at least one."""
    streams_per_pod = _check_count("streams per pod", streams_per_pod, minimum=1)
    n = np.asarray(ns, dtype=np.int64)
    s = streams_for_teams(n, demand, alpha)
    pods = -(-s // streams_per_pod)
    return np.where(n > 0, np.maximum(pods, 1), 0)


def pods_for_team(n: int, streams_per_pod: int, demand: Demand, alpha: float) -> int:
    return int(pods_for_teams([_check_count("team size", n)], streams_per_pod, demand, alpha)[0])


def pods_partitioned(n: int, seats_per_pod: int) -> int:
    """Pods when each developer is pinned to one pod: ceil(n / seats per pod)."""
    n = _check_count("team size", n)
    if seats_per_pod < 1:
        raise InputError("a pod serves no developer under this rule (seats per pod is 0): relax alpha or add streams")
    return -(-n // seats_per_pod)


def max_team_for_pods(pods: int, streams_per_pod: int, demand: Demand, alpha: float) -> int:
    """The largest team ``pods`` pods serve under the rule (their streams pooled)."""
    return seats_for_streams(_check_count("pods", pods) * _check_count("streams per pod", streams_per_pod, 1),
                             demand, alpha)


def pod_breakpoints(max_team: int, streams_per_pod: int, demand: Demand, alpha: float) -> list[tuple[int, int]]:
    """(pods, largest team served) for 1, 2, … pods until a team of ``max_team`` is covered.

    This is the pods-for-a-team curve in a few rows: a team of n needs the first row whose team is ≥ n.
    """
    out = []
    pods = 0
    while not out or out[-1][1] < max_team:
        pods += 1
        out.append((pods, max_team_for_pods(pods, streams_per_pod, demand, alpha)))
    return out


def seats_by_volume(pod_output_tok_s: float, developer_output_tok_per_hour: float, utilization: float = 1.0) -> float:
    """Developers whose output a pod could produce over the same time: its output rate, used ``utilization`` of the
    time, over one developer's output per wall-clock hour (so the hours of a month cancel)."""
    if not pod_output_tok_s > 0 or not developer_output_tok_per_hour > 0:
        raise InputError("a pod's output rate and a developer's output must both be positive")
    if not (0 < utilization <= 1):
        raise InputError(f"utilization must be in (0, 1]; got {utilization!r}")
    return pod_output_tok_s * 3600.0 * utilization / developer_output_tok_per_hour


def streams_at_bar(streams: Sequence[int], median_tok_s: Sequence[float], bar_tok_s: float,
                   margin: float = 0.0) -> int:
    """The most streams of a measured sweep whose median per-stream rate, and every smaller load's, stays at or
    above the bar raised by ``margin`` (0.1 = 10%); 0 when even one stream misses it."""
    pairs = sorted(zip(streams, median_tok_s))
    best = 0
    for s, med in pairs:
        if med >= bar_tok_s * (1.0 + margin) - 1e-9:
            best = int(s)
        else:
            break
    return best


def exact_binomial_sf(s: int, n: int, q: float) -> float:
    """P(Binomial(n, q) > s) summed term by term in rational arithmetic: the reference the tests hold scipy to."""
    from fractions import Fraction

    qf = Fraction(q)
    total = sum(Fraction(math.comb(n, k)) * qf**k * (1 - qf) ** (n - k) for k in range(s + 1, n + 1))
    return float(total)
