"""Money: a pod rented by the hour against subscriptions bought by the seat.

A pod runs day and night, so its month is ``HOURS_PER_MONTH`` = 24 × 365 / 12 = 730 hours (an average month; state
another with ``hours_per_month``). Break-even: the number of subscriptions that cost as much as one pod a month.
For a team, self-hosting costs its pods (from :mod:`offload_lab.seats.capacity`) and subscriptions cost a seat per
developer; the saving fraction is the share of the subscription bill that self-hosting saves (negative when the pods
cost more).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import pandas as pd

from offload_lab.seats import capacity
from offload_lab.seats.capacity import Demand
from offload_lab.core.errors import InputError

HOURS_PER_MONTH = 24 * 365 / 12  # 730: a pod billed around the clock, over an average month


CURRENCY_PATTERN = r"^[A-Z]{3}$"  # an ISO 4217 code: EUR, USD, ...


def check_currency(code: str) -> str:
    """The three-letter code, upper-cased; InputError naming it otherwise."""
    text = str(code).strip().upper()
    if not (len(text) == 3 and text.isalpha() and text.isascii()):
        raise InputError(f"{code!r} is not a three-letter currency code, e.g. EUR or USD")
    return text


@dataclass(frozen=True)
class Prices:
    """A pod's price an hour and a seat's a month, both in ``currency`` (a price never travels without it)."""

    pod_price_per_hour: float
    seat_price_per_month: float
    hours_per_month: float = HOURS_PER_MONTH
    currency: str = field(kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "currency", check_currency(self.currency))
        if not self.pod_price_per_hour > 0:
            raise InputError(f"the pod price must be positive {self.currency} an hour; got {self.pod_price_per_hour!r}")
        if not self.seat_price_per_month > 0:
            raise InputError(f"the subscription must be positive {self.currency} a seat a month; "
                             f"got {self.seat_price_per_month!r}")
        if not (0 < self.hours_per_month <= 24 * 31):
            raise InputError(f"hours a month must be in (0, 744]; got {self.hours_per_month!r}")

    @property
    def pod_price_per_month(self) -> float:
        return self.pod_price_per_hour * self.hours_per_month

    @property
    def break_even_seats(self) -> float:
        """Subscriptions a month that cost as much as one pod a month."""
        return self.pod_price_per_month / self.seat_price_per_month


@dataclass(frozen=True)
class TeamCost:
    """A team's month both ways, in ``currency``: one row of the costed tables (column names carry no currency; the
    ``currency`` column does, so that one campaign's frame reads like another's)."""

    team: int
    pods: int
    self_hosted_per_month: float
    subscriptions_per_month: float
    currency: str

    @property
    def difference_per_month(self) -> float:
        """Subscriptions minus self-hosting: what self-hosting saves a month (negative: what it costs extra)."""
        return self.subscriptions_per_month - self.self_hosted_per_month

    @property
    def saving_fraction(self) -> float:
        if self.subscriptions_per_month == 0:
            return 0.0
        return self.difference_per_month / self.subscriptions_per_month

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["difference_per_month"] = self.difference_per_month
        d["saving_fraction"] = self.saving_fraction
        return d


def team_cost(team: int, pods: int, prices: Prices) -> TeamCost:
    if team < 0 or pods < 0:
        raise InputError("team size and pods must not be negative")
    return TeamCost(team, pods, pods * prices.pod_price_per_month, team * prices.seat_price_per_month, prices.currency)


def team_costs(teams: Sequence[int], streams_per_pod: int, demand: Demand, alpha: float,
               prices: Prices) -> pd.DataFrame:
    """One row per team size: pods (pooled streams), monthly cost both ways, difference and saving fraction."""
    pods = capacity.pods_for_teams(teams, streams_per_pod, demand, alpha)
    return pd.DataFrame([team_cost(int(n), int(p), prices).to_dict() for n, p in zip(teams, pods)])


def break_even_team(streams_per_pod: int, demand: Demand, alpha: float, prices: Prices,
                    max_team: int = 100_000) -> int | None:
    """The smallest team for which self-hosting costs no more than subscriptions; None if none up to ``max_team``.

    Not simply ceil(break-even seats): a team that outgrows one pod's seats needs a second pod.
    """
    step = 1024
    lo = 1
    while lo <= max_team:
        ns = list(range(lo, min(lo + step, max_team + 1)))
        pods = capacity.pods_for_teams(ns, streams_per_pod, demand, alpha)
        for n, p in zip(ns, pods):
            if p * prices.pod_price_per_month <= n * prices.seat_price_per_month:
                return n
        lo += step
    return None


@dataclass(frozen=True)
class Scenario:
    """One point of a sensitivity analysis: every input of the seat and cost rule."""

    q: float
    alpha: float
    streams_per_pod: int
    pod_price_per_hour: float
    seat_price_per_month: float
    currency: str
    rho: float = 0.0
    hours_per_month: float = HOURS_PER_MONTH

    def demand(self) -> Demand:
        return Demand(self.q, self.rho)

    def prices(self) -> Prices:
        return Prices(self.pod_price_per_hour, self.seat_price_per_month, self.hours_per_month, currency=self.currency)


# The inputs a sensitivity analysis may vary (the currency is a label, not a number).
VARIABLE = ("q", "alpha", "streams_per_pod", "pod_price_per_hour", "seat_price_per_month", "rho", "hours_per_month")


def evaluate(s: Scenario, teams: Iterable[int]) -> dict[str, Any]:
    """Seats per pod, break-even, and pods, costs and saving for each team, under one scenario."""
    demand, prices = s.demand(), s.prices()
    row: dict[str, Any] = asdict(s)
    row["seats_per_pod"] = capacity.seats_for_streams(s.streams_per_pod, demand, s.alpha)
    row["pod_price_per_month"] = prices.pod_price_per_month
    row["break_even_seats"] = prices.break_even_seats
    for n in teams:
        c = team_cost(n, capacity.pods_for_team(n, s.streams_per_pod, demand, s.alpha), prices)
        row[f"pods_team_{n}"] = c.pods
        row[f"saving_fraction_team_{n}"] = c.saving_fraction
    return row


def sensitivity(base: Scenario, variations: dict[str, Sequence[float]], teams: Iterable[int]) -> pd.DataFrame:
    """Vary one input at a time around ``base``; one row per (input, value), the base itself marked."""
    teams = list(teams)
    rows = []
    for name, values in variations.items():
        if name not in VARIABLE:
            raise InputError(f"sensitivity: {name!r} is not an input (one of {sorted(VARIABLE)})")
        for v in values:
            cast = int(v) if name == "streams_per_pod" else float(v)
            s = Scenario(**{**asdict(base), name: cast})
            row = {"varied": name, "value": cast, "is_base": cast == getattr(base, name), **evaluate(s, teams)}
            rows.append(row)
    return pd.DataFrame(rows)


def quote(q: float, streams_per_pod: int, alpha: float, team: int, prices: Prices, rho: float = 0.0) -> dict[str, Any]:
    """Seats, pods and money for one team under one rule: what ``offload-lab capacity --json`` prints."""
    demand = Demand(q, rho)
    team = capacity._check_count("team size", team, minimum=1)
    seats = capacity.seats_for_streams(streams_per_pod, demand, alpha)
    streams = capacity.streams_for_team(team, demand, alpha)
    pods = capacity.pods_for_team(team, streams_per_pod, demand, alpha)
    c = team_cost(team, pods, prices)
    return {
        "model": demand.model,
        "q": q,
        "rho": rho,
        "alpha": alpha,
        "streams_per_pod": streams_per_pod,
        "seats_per_pod": seats,
        "team": team,
        "streams_needed": streams,
        "pods": pods,
        "pods_partitioned": capacity.pods_partitioned(team, seats) if seats >= 1 else None,
        "overflow_probability": capacity.overflow_probability(team, pods * streams_per_pod, demand),
        "hours_per_month": prices.hours_per_month,
        "currency": prices.currency,
        "pod_price_per_hour": prices.pod_price_per_hour,
        "pod_price_per_month": prices.pod_price_per_month,
        "seat_price_per_month": prices.seat_price_per_month,
        "break_even_seats": prices.break_even_seats,
        "break_even_team": break_even_team(streams_per_pod, demand, alpha, prices),
        "team_self_hosted_per_month": c.self_hosted_per_month,
        "team_subscriptions_per_month": c.subscriptions_per_month,
        "difference_per_month": c.difference_per_month,
        "saving_fraction": c.saving_fraction,
    }
