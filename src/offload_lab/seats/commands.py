"""What ``offload-lab capacity`` and ``offload-lab profile`` compute, as models and one call each: the command line
builds a model from its flags (:mod:`offload_lab.cli.model_options`) and prints the :class:`Outcome` (its lines, or
its payload with ``--json``). Each field is typed here once; its description is the flag's help."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from offload_lab.core.bounds import MAX_PRICE, MAX_TOKEN_RATE
from offload_lab.core.errors import InputError
from offload_lab.core.outcome import Outcome
from offload_lab.seats import cost, team as team_model
from offload_lab.seats.cost import CURRENCY_PATTERN, HOURS_PER_MONTH

# A team above a million developers is a typo (1e12 was accepted and sized); the binomial sums stay cheap below it.
MAX_TEAM = 1_000_000


class Timing(BaseModel):
    """How a usage profile's tokens are timed: at the bar's rate per stream, new input at the prefill rate."""

    model_config = ConfigDict(extra="forbid")

    window_hours: float = Field(8.0, gt=0, le=24, description="with a ccusage export: hours of the working window "
                                                              "on each active day")
    stream_tok_s: float | None = Field(None, gt=0, le=MAX_TOKEN_RATE, validate_default=True,
                                       description="output tokens/s per stream to time a profile's tokens at (the "
                                                   "bar)")
    prefill_tok_s: float | None = Field(None, gt=0, le=MAX_TOKEN_RATE, description="prefill tokens/s for a "
                                        "profile's new input tokens (needed when it has some)")


class Demand(BaseModel):
    """Where q comes from: given, or timed from usage files (declared before the timing, which checks it)."""

    model_config = ConfigDict(extra="forbid")

    q: float | None = Field(None, gt=0, le=1, description="chance a developer is generating at a moment of the "
                                                           "window, e.g. 0.071")
    profile: list[str] | None = Field(None, description="usage profile YAML or ccusage JSON export to compute q "
                                      "from; again for each developer, or a team export: each their own q")


class CapacityQuery(Timing, Demand):
    """One team under the seat rule: seats, pods and money."""
    streams_per_pod: int = Field(..., ge=1, description="streams one pod serves at the bar")
    alpha: float = Field(..., gt=0, lt=1, description="accepted chance that more developers generate at once than "
                                                      "there are streams, e.g. 0.01")
    team: int | None = Field(None, ge=1, le=MAX_TEAM, description="developers in the team (with several "
                                                                  "developers' files: theirs)")
    pod_price: float = Field(..., gt=0, le=MAX_PRICE, description="pod price an hour, in --currency")
    seat_price: float = Field(..., gt=0, le=MAX_PRICE, description="subscription a seat a month, in --currency")
    currency: str = Field("EUR", pattern=CURRENCY_PATTERN, description="the prices' currency, a three-letter code")
    hours_per_month: float = Field(HOURS_PER_MONTH, gt=0, le=744, description="hours a pod is billed a month "
                                                                              "(24 x 365 / 12: day and night)")
    rho: float = Field(0.0, ge=0, lt=1, description="intra-team correlation (0: developers independent)")

    @field_validator("currency", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("stream_tok_s", mode="after")
    @classmethod
    def _timed(cls, v: float | None, info: ValidationInfo) -> float | None:
        if v is None and info.data.get("profile"):
            raise ValueError("a usage profile needs the per-stream output rate to time its tokens at")
        return v

    def prices(self) -> cost.Prices:
        return cost.Prices(self.pod_price, self.seat_price, self.hours_per_month, currency=self.currency)


class ProfileQuery(Timing):
    """One usage profile, timed."""

    file: str = Field(..., description="usage profile YAML (configs/profiles/*.yaml) or a ccusage daily/session JSON "
                                       "export")

    @field_validator("stream_tok_s", mode="after")
    @classmethod
    def _needed(cls, v: float | None) -> float | None:
        if v is None:
            raise ValueError("the per-stream output rate is needed to time the profile's tokens")
        return v
    sessions: int | None = Field(None, ge=1, description="for a ccusage daily export: sessions in the period "
                                                         "(default: one a day)")


def capacity(query: CapacityQuery) -> Outcome:
    """Seats, pods and money for one team (a q, or one developer's profile scaled to ``team``), or for the
    developers a set of usage files holds, each with their own q (Poisson-binomial, correlated with ``rho``)."""
    from offload_lab.seats.profile import profile_timing
    from offload_lab.seats.usage_export import load_team_usage

    if (query.q is None) == (not query.profile):
        raise InputError("give q or a usage profile (one of them)")
    q, q_from = query.q, "given"
    if query.profile:
        devs = load_team_usage(query.profile, query.window_hours, None)
        if len(devs) > 1 and query.team is not None and query.team != len(devs):
            raise InputError(f"team {query.team}: the usage files hold {len(devs)} developers; leave the team size "
                             "out (the team is theirs) or give one developer's file to scale to a team")
        qs = [(name, profile_timing(prof, query.stream_tok_s, query.prefill_tok_s).q) for name, prof, _ in devs]
        if len(qs) > 1:
            return _team_of_developers(query, qs)
        q, q_from = qs[0][1], f"profile {query.profile[0]}"
    if query.team is None:
        raise InputError("the team size is needed: give the developers in the team to size and cost")
    r = {"q_from": q_from, **cost.quote(q, query.streams_per_pod, query.alpha, query.team, query.prices(),
                                         rho=query.rho)}
    cur = r["currency"]
    return Outcome(r, [
        f"q = {r['q']:.4g} ({q_from}), {r['model']} model, alpha = {r['alpha']:g}",
        f"one pod of {r['streams_per_pod']} streams serves at most {r['seats_per_pod']} developers",
        f"a team of {r['team']} needs {r['streams_needed']} streams: {r['pods']} pod(s) with streams pooled "
        f"({r['pods_partitioned']} with each developer pinned to one pod); P(overflow) = "
        f"{r['overflow_probability']:.3g}",
        f"a pod costs {r['pod_price_per_month']:,.2f} {cur} a month ({r['hours_per_month']:g} hours); break-even at "
        f"{r['break_even_seats']:.2f} subscriptions (smallest team that saves: {r['break_even_team']})",
        f"team: {r['team_self_hosted_per_month']:,.2f} {cur} a month self-hosted against "
        f"{r['team_subscriptions_per_month']:,.2f} {cur} in subscriptions; saving {100 * r['saving_fraction']:.1f}%"])


def _team_of_developers(query: CapacityQuery, qs: list[tuple[str, float]]) -> Outcome:
    q = [v for _, v in qs]
    prices = query.prices()
    streams = team_model.streams_needed(q, query.alpha, query.rho)
    pods = team_model.pods_needed(q, query.streams_per_pod, query.alpha, query.rho)
    c = cost.team_cost(len(q), pods, prices)
    model = "poisson-binomial" + (", correlated" if query.rho else "")
    r = {"model": model, "developers": [{"name": n, "q": v} for n, v in qs], "team": len(q), "alpha": query.alpha,
         "rho": query.rho, "streams_per_pod": query.streams_per_pod, "streams_needed": streams, "pods": pods,
         "overflow_probability": team_model.sf(pods * query.streams_per_pod, q, query.rho),
         "mean_generating": sum(q), "currency": prices.currency, "hours_per_month": prices.hours_per_month,
         "pod_price_per_month": prices.pod_price_per_month, "seat_price_per_month": prices.seat_price_per_month,
         "team_self_hosted_per_month": c.self_hosted_per_month,
         "team_subscriptions_per_month": c.subscriptions_per_month, "saving_fraction": c.saving_fraction}
    cur = prices.currency
    return Outcome(r, [*(f"  {n}: q = {v:.4g}" for n, v in qs),
                       f"a team of {len(q)} (Poisson-binomial of their own q"
                       f"{f', correlated at rho = {query.rho:g}' if query.rho else ''}, {sum(q):.3g} generating on "
                       "average) needs "
                       f"{streams} streams at alpha = {query.alpha:g}: {pods} pod(s); P(overflow) = "
                       f"{r['overflow_probability']:.3g}",
                       f"team: {c.self_hosted_per_month:,.2f} {cur} a month self-hosted against "
                       f"{c.subscriptions_per_month:,.2f} {cur} in subscriptions; saving "
                       f"{100 * c.saving_fraction:.1f}%"])


def profile(query: ProfileQuery) -> Outcome:
    """Validate a usage profile and time it: hours generating, share of the period, q."""
    from offload_lab.seats.profile import profile_timing
    from offload_lab.seats.usage_export import load_usage

    prof, source = load_usage(query.file, query.window_hours, query.sessions)
    timing = profile_timing(prof, query.stream_tok_s, query.prefill_tok_s)
    published = prof.published.model_dump() if prof.published else None
    payload = {"profile": prof.name, "source": source, "provenance": prof.provenance.model_dump(),
               "tokens": prof.tokens.model_dump(), "period_days": prof.period_days, "active_days": prof.active_days,
               "sessions": prof.sessions, "window_hours": prof.window_hours, "timing": timing.to_dict(),
               "published": published}
    pv = prof.provenance
    lines = [f"profile {prof.name} ({source['format']}; {pv.kind}: {pv.source}"
             f"{', ' + pv.section if pv.section else ''}) is valid"]
    if source["format"] != "profile-yaml":
        lines.append(f"  {prof.active_days:g} active days in {prof.period_days:g}, {prof.sessions} sessions; "
                     f"{pv.note}")
    lines.append(f"  {timing.hours_generating:.3g} hours generating in {prof.period_days:g} days "
                 f"({100 * timing.fraction_of_period:.2f}% of the period); q = {timing.q:.4g} over a window of "
                 f"{timing.window_hours_in_period:g} hours")
    if not timing.split_known:
        lines.append(f"  (split {timing.split_basis}; output {timing.output_tokens_range[0]:,.0f} to "
                     f"{timing.output_tokens_range[1]:,.0f} tokens)")
    if published:
        lines.append(f"  published: {published}")
    return Outcome(payload, lines)
