"""The study's derived seat and cost figures beside this project's recomputation of each.

The study derived seats by volume and by concurrency, the pod's month, the subscriptions it buys, pods and savings
for three teams (``configs/published/derived.yaml``). The ``capacity`` and ``cost`` experiments recompute each from
the published inputs; :func:`seat_comparisons` and :func:`cost_comparisons` set the two side by side, with the
difference and, where the recomputation carries a range (an inferred split, a rounded price), the range, so that the
capacity section's claims and the closing table of every published figure read the same rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pandas as pd

from offload_lab.paper.formats import fmt_int, fmt_signed
from offload_lab.seats.profile import rounding_interval

Formatter = Callable[[Any], str]


@dataclass(frozen=True)
class Comparison:
    key: str  # the published figure it recomputes
    what: str  # in words, for a table row
    published: float
    recomputed: float
    unit: str
    fmt: Formatter  # how the published and the recomputed values print
    low: float | None = None  # the recomputation's range, where it carries one
    high: float | None = None
    note: str = ""  # why the two differ, where they do
    printed: str | None = None  # the published value as the source printed it ("39%", "2,723")
    # The published figure was one of the constraints that fixed an input of the recomputation (the seats by volume
    # fix the inferred week): the two agree by construction, and the difference says nothing.
    by_construction: bool = False

    @property
    def difference(self) -> float:
        return self.recomputed - self.published

    def row(self) -> list[str]:
        rng = "" if self.low is None or self.high is None else f"{self.fmt(self.low)} to {self.fmt(self.high)}"
        diff = "by construction" if self.by_construction else fmt_signed(self.fmt)(self.difference)
        return [self.what, self.printed or self.fmt(self.published), self.fmt(self.recomputed), rng, diff, self.unit]


COLUMNS = ["Figure", "Published", "Recomputed", "Range", "Difference", "Unit"]


def _value(figures: Mapping[str, Mapping[str, Any]], key: str) -> float | None:
    f = figures.get(key)
    v = None if f is None else f.get("value")
    return None if v is None or isinstance(v, (str, list)) else float(v)


def _floor(v: float) -> int:
    return math.floor(v + 1e-9)  # whole developers, as the project counts them (claims volume.seats_*)


def _pct_points(v: Any) -> str:
    return f"{100 * float(v):.1f}%"


def seat_comparisons(figures: Mapping[str, Mapping[str, Any]], volume: pd.DataFrame, seats: pd.DataFrame
                     ) -> list[Comparison]:
    """Seats by volume (full and half utilization, with the range of the inferred split) and by concurrency."""
    out = []
    for key, u, what in (("volume_devs_full", 1.0, "Developers one pod serves by volume, fully used"),
                         ("volume_devs_half", 0.5, "Developers one pod serves by volume, busy half the time")):
        p = _value(figures, key)
        row = volume[volume["utilization"] == u]
        if p is None or row.empty:
            continue
        r = row.iloc[0]
        out.append(Comparison(key, what, p, _floor(r["seats_by_volume"]), "developers", fmt_int,
                              low=_floor(r["seats_by_volume_high"]) if "seats_by_volume_high" in r else None,
                              high=_floor(r["seats_by_volume_low"]) if "seats_by_volume_low" in r else None,
                              # an inferred week is fixed by these very figures (seats.joint)
                              by_construction=str(r.get("split", "")) == "inferred"))
    for key, alpha, what in (("seats_alpha_1pct", 0.01, "Developers one pod serves by concurrency, α = 1%"),
                             ("seats_alpha_5pct", 0.05, "Developers one pod serves by concurrency, α = 5%")):
        p = _value(figures, key)
        sel = seats[(seats["alpha"].round(6) == alpha) & (seats["model"] == "binomial")]
        if p is None or sel.empty:
            continue
        out.append(Comparison(key, what, p, float(sel["seats"].iloc[0]), "developers", fmt_int))
    return with_printed(out, figures)


def cost_comparisons(figures: Mapping[str, Mapping[str, Any]], cost: Mapping[str, Any], costed: pd.DataFrame
                     ) -> list[Comparison]:
    """The pod's month, the subscriptions it buys, and pods, extra cost and savings for the published teams."""
    out = []
    # The study's figures are in EUR (its published keys say so); the recomputation's prices are the run's, in
    # cost.json's currency, which the published source holds to EUR (StudyParams).
    price, hours = float(cost["pod_price_per_hour"]), float(cost["hours_per_month"])
    seat = float(cost["seat_price_per_month"])
    # The price is printed to the cent: a figure derived from it carries that rounding.
    p_lo, p_hi = rounding_interval(f"{price:g}")
    month = _value(figures, "pod_eur_per_month")
    if month is not None:
        out.append(Comparison("pod_eur_per_month", "The pod a month, run day and night", month,
                              float(cost["pod_price_per_month"]), "EUR", lambda v: f"{float(v):,.1f}",
                              low=p_lo * hours, high=p_hi * hours))
    for key, fmt in (("subscriptions_per_pod", lambda v: f"{float(v):.1f}"),
                     ("subscriptions_per_pod_blog", fmt_int)):
        p = _value(figures, key)
        if p is not None:
            got = float(cost["break_even_seats"])
            out.append(Comparison(key, "Subscriptions the pod's month buys" + (" (the blog)" if "blog" in key else ""),
                                  p, math.floor(got) if "blog" in key else got, "seats", fmt,
                                  note="the blog rounds down" if "blog" in key else ""))
    alpha = float(cost.get("alpha", 0.01))
    teams = costed[(costed["label"] == "published") & (costed["alpha"].round(6) == round(alpha, 6))]
    for team in (20, 100, 250):
        row = teams[teams["team"] == team]
        if row.empty:
            continue
        r = row.iloc[0]
        p = _value(figures, f"team_{team}_pods")
        if p is not None:
            out.append(Comparison(f"team_{team}_pods", f"Pods for a team of {team}, α = {alpha:.0%}", p,
                                  float(r["pods"]), "pods", fmt_int))
        extra = _value(figures, f"team_{team}_extra_eur")
        if extra is not None:
            pods = float(r["pods"])
            out.append(Comparison(f"team_{team}_extra_eur", f"Team of {team}: self-hosting over subscriptions", extra,
                                  -float(r["difference_per_month"]), "EUR a month", fmt_int,
                                  low=pods * hours * p_lo - team * seat, high=pods * hours * p_hi - team * seat,
                                  note=f"within the rounding of the printed price ({price:g} EUR an hour)"))
        saving = _value(figures, f"team_{team}_saving")
        if saving is not None:
            out.append(Comparison(f"team_{team}_saving", f"Team of {team}: saving against subscriptions", saving,
                                  float(r["saving_fraction"]), "of the bill", _pct_points,
                                  note="the study prints whole percent"))
    return with_printed(out, figures)


def with_printed(rows: list[Comparison], figures: Mapping[str, Mapping[str, Any]]) -> list[Comparison]:
    """Each row with its published value as the source printed it, where the transcription records that."""
    from dataclasses import replace

    return [replace(c, printed=(figures.get(c.key) or {}).get("as_published")) for c in rows]
