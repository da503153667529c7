"""One answer for a team: does the model fit the pod, how fast each stream goes at 1-8 streams against the bar,
how many streams a pod keeps, how many developers that seats at alpha, and what pods cost against subscriptions for
each team size. Every figure is labelled predicted; nothing is written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from offload_lab.core.errors import InputError
from offload_lab.predict.physics import Predictor
from offload_lab.predict.pod import PodInput
from offload_lab.seats import capacity, cost

STREAMS = list(range(1, 9))
LABEL = "predicted from hardware figures (offload-lab pod predict); nothing here was measured"


@dataclass(frozen=True)
class Team:
    sizes: tuple[int, ...]
    alpha: float
    q: float
    q_source: str
    bar_tok_s: float
    margin: float
    context_tokens: int
    seat_price: float | None = None  # a subscription a seat a month, in the pod's currency
    seat_source: str | None = None


def answer(pin: PodInput, p: Predictor, team: Team) -> dict[str, Any]:
    fits = p.fits()
    out: dict[str, Any] = {"label": LABEL, "pod": pin.name, "fits": fits, "plan": pin.provenance.get("plan"),
                           "factors": {k: float(v) for k, v in p.factors.__dict__.items()}}
    if not fits["fits_gpu"] or fits.get("fits_host") is False:
        out["verdict"] = ("does not fit: " + ("the GPUs cannot hold what stays on them"
                                             if not fits["fits_gpu"] else "the host RAM cannot hold the plan's experts"))
        return out
    ctx = team.context_tokens
    rates = [float(p.tok_s(s, ctx)) for s in STREAMS]
    kept = capacity.streams_at_bar(STREAMS, rates, team.bar_tok_s, team.margin)
    # every kept stream must also have its context in the KV cache
    kv_streams = p.kv_capacity_tokens() // max(1, team.context_tokens)
    kept_kv = min(kept, max(0, int(kv_streams)))
    out.update({
        "verdict": "fits",
        "context_tokens": ctx,
        "streams": [{"streams": s, "tok_s_per_stream": round(r, 1), "meets_bar": r >= team.bar_tok_s * (1 + team.margin)}
                    for s, r in zip(STREAMS, rates)],
        "bar_tok_s": team.bar_tok_s, "margin": team.margin,
        "streams_kept": kept_kv, "streams_kept_by_speed": kept, "streams_kept_by_kv": int(kv_streams),
        "kv_capacity_tokens": p.kv_capacity_tokens(),
    })
    if kept_kv < 1:
        out["verdict"] = "fits, but no stream meets the bar"
        return out
    demand = capacity.Demand(team.q)
    seats = capacity.seats_for_streams(kept_kv, demand, team.alpha)
    out["q"] = {"value": team.q, "source": team.q_source}
    out["alpha"] = team.alpha
    out["seats_per_pod"] = seats
    rows = []
    price, cur = pin.price_per_hour, pin.currency
    prices = None
    if price is not None and team.seat_price is not None:
        prices = cost.Prices(price, team.seat_price, currency=cur)
    for n in team.sizes:
        pods = capacity.pods_for_team(n, kept_kv, demand, team.alpha)
        row: dict[str, Any] = {"team": n, "pods": pods}
        if prices is not None:
            c = cost.team_cost(n, pods, prices)
            row.update({"currency": c.currency, "self_hosted_per_month": round(c.self_hosted_per_month, 2),
                        "subscriptions_per_month": round(c.subscriptions_per_month, 2),
                        "saving_per_month": round(c.difference_per_month, 2),
                        "saving_fraction": round(c.saving_fraction, 4)})
        rows.append(row)
    out["teams"] = rows
    out["price"] = {"pod_per_hour": price, "seat_per_month": team.seat_price, "currency": cur,
                    "seat_source": team.seat_source}
    return out


def parse_sizes(text: str | Sequence[int]) -> tuple[int, ...]:
    if not isinstance(text, str):
        vals = list(text)
    else:
        try:
            vals = [int(x) for x in text.replace(" ", "").split(",") if x]
        except ValueError:
            raise InputError(f"--team-sizes {text!r}: give whole numbers separated by commas, e.g. 30,100") from None
    if not vals or any(v < 1 or v > 1_000_000 for v in vals):
        raise InputError(f"--team-sizes {text!r}: each size from 1 to 1,000,000")
    return tuple(vals)
