"""Claims of the paper's section on seats and cost, from the ``capacity`` and ``cost`` experiments' runs.

They are declared into :data:`SECTION`, so that importing this module changes nothing else; the paper finds them by
folder (:func:`offload_lab.paper.discovery.claim_registry`). Each claim reads only the files it cites, from the latest
ok run of its experiment; the values were computed by :mod:`offload_lab.experiments.capacity.runner` and :mod:`offload_lab.experiments.cost.runner`
from the campaign's published figures or its own runs (``claims_sources`` says which).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from offload_lab.paper.claims import NA, NotApplicable
from offload_lab.published.refclaims import CITES
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.formats import fmt_int, fmt_pct, fmt_sig
from offload_lab.paper.claims import claim as _claim
from offload_lab.core.runs import MANIFEST
from offload_lab.experiments.capacity.claims_teams import pick_row

CAP = "capacity"
COST = "cost"
SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


def fmt_pct_sig(digits: int) -> Callable[[Any], str]:
    """A small probability as a percentage with ``digits`` significant figures: 0.00656 → 0.66%."""
    sig = fmt_sig(digits)
    return lambda v: sig(100 * float(v)) + "%"


def fmt_price(value: Any) -> str:
    return f"{float(value):,.2f}"


def fmt_list(value: Any) -> str:
    items = [f"{int(x):,}" for x in value]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _row(frame: Any, **where: Any) -> Any:
    if "alpha" in where:
        where["alpha"] = _alpha_of(frame, where["alpha"])
    return pick_row(frame, **where)


def _values(src: Sources) -> dict[str, Any]:
    return src.json("inputs.json")["values"]


RULE = "rule"  # the seat rule's α: the campaign's first


def _alpha_of(frame: Any, which: Any) -> Any:
    """The campaign's α: the runners write their rows α by α, the seat rule's first. A number names an α the study
    reports (1%, 5%): a campaign without it makes the claim n/a (its own α are in ``seats.at_alphas``)."""
    alphas = list(dict.fromkeys(float(a) for a in frame["alpha"]))
    if which == RULE:
        return alphas[0]
    if not any(abs(a - float(which)) < 1e-12 for a in alphas):
        raise NotApplicable(f"this campaign reports no α = {float(which):g}")
    return float(which)


def _team_rows(frame: Any, team: int) -> Any:
    """The rows of a team the claim's name gives: a campaign that costs other teams makes the claim n/a (the text
    speaks of its own teams through claims_teams)."""
    named = frame[frame["label"] == "published"] if "label" in frame else frame  # not the one-pod rows' sizes
    if "team" in frame and not (named["team"] == team).any():
        raise NotApplicable(f"no team of {team} in this campaign")
    return frame


# -- capacity: inputs as used ---------------------------------------------------------------------------------------

# Inputs as used, one claim each: (name, key of inputs.json's values, format, unit, description).
_INPUTS: tuple[tuple[str, str, Any, str, str], ...] = (
    ("capacity.q", "q", fmt_pct(1), "probability",
     "q used by the seat models: the chance a developer is generating at a moment of the window"),
    ("capacity.alpha", "alpha", fmt_pct(0), "probability",
     "The seat rule's α: accepted chance that more developers generate at once than there are streams"),
    ("capacity.streams_per_pod", "streams_per_pod", fmt_int, "streams", "Streams a pod serves at the bar (published, or kept at the bar in this campaign's sweep)"),
    ("capacity.streams_at_bar_table", "streams_at_bar_from_table", fmt_int, "streams",
     "Streams at the bar with the margin, recomputed from the agent-turn table (published or measured)"),
    ("capacity.bar_tok_s", "bar_tok_s", fmt_int, "tokens/s", "The bar: median output tokens per second per stream"),
    ("capacity.turn_seconds", "turn_seconds", fmt_sig(2), "s",
     "Seconds one agent reply takes at the bar (the reply length over the bar)"),
    ("capacity.prefill_tok_s", "prefill_tok_s", fmt_int, "tokens/s",
     "The prefill rate the profile is timed at: the longest fresh prompt over its TTFT (published or measured)"),
)
for _name, _key, _fmt, _unit, _what in _INPUTS:
    claim(_name, experiment=CAP, files=["inputs.json"], fmt=_fmt, unit=_unit, description=_what)(
        lambda src, _k=_key: _values(src)[_k])


@claim("capacity.q_source", experiment=CAP, files=["inputs.json"], fmt="{}", unit="")
def _q_source(src: Sources) -> str:
    """Where q came from: the published figure or this project's timing of the profile."""
    return "the published figure" if _values(src)["q_source"] == "published" else "this project's timing"


@claim("capacity.team_sizes", experiment=CAP, files=["inputs.json"], fmt=fmt_list, unit="developers")
def _teams(src: Sources) -> list[int]:
    """Team sizes the study costs."""
    return [int(t) for t in _values(src)["team_sizes"]]


def _team_size(rank: int) -> Callable[[Sources], int]:
    def f(src: Sources) -> int:
        # any number of sizes: the smallest, the middle one and the largest (one size is all three)
        teams = sorted(int(t) for t in _values(src)["team_sizes"])
        return teams[(0, len(teams) // 2, -1)[rank]]

    return f


for _rank, _word in enumerate(("small", "medium", "large")):
    claim(f"teams.{_word}", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="developers",
          description=f"The {_word} team size the study costs")(_team_size(_rank))


# -- capacity: the profile -------------------------------------------------------------------------------------------

def _computed(src: Sources) -> dict[str, Any]:
    return src.json("profile.json")["computed"]


def _published(src: Sources, key: str) -> float | str:
    # A user's own export publishes nothing: the claim prints n/a, and the text prints it only when it is not.
    pub = src.json("profile.json")["published"] or {}
    if pub.get(key) is None:
        return NA
    return float(pub[key])


def _end(v: Any, end: int | None) -> float:
    return float(v if end is None else v[end])


# The profile as this project times it, one claim each: (name, field of profile.json's computed, end of its range
# or None for the value, scale, format, unit, description). Ranges come from an inferred split (issue 12).
_K = lambda v: f"{float(v) / 1e3:,.0f}"  # noqa: E731 - thousands
_M = lambda v: f"{float(v) / 1e6:,.1f}"  # noqa: E731 - millions
_PROFILE: tuple[tuple[str, str, int | None, Any, str, str], ...] = (
    ("profile.hours_generating", "hours_generating", None, fmt_sig(3), "hours",
     "Hours a week generating, timed by this project from the profile's tokens"),
    ("profile.hours_low", "hours_generating_range", 0, fmt_sig(3), "hours",
     "Lowest hours a week that every published rounding allows"),
    ("profile.hours_high", "hours_generating_range", 1, fmt_sig(3), "hours",
     "Highest hours a week that every published rounding allows (exclusive)"),
    ("profile.fraction_of_week", "fraction_of_period", None, fmt_pct(1), "fraction",
     "Share of the week spent generating, computed here"),
    ("profile.q_computed", "q", None, fmt_pct(1), "probability",
     "q computed by this project from the profile's tokens and the bar"),
    ("profile.output_tokens", "output_tokens", None, _K, "thousand tokens",
     "Output tokens in the week (central value of the inferred split), in thousands"),
    ("profile.output_tokens_low", "output_tokens_range", 0, _K, "thousand tokens",
     "Output tokens in the week, low end of the inferred range, in thousands"),
    ("profile.output_tokens_high", "output_tokens_range", 1, _K, "thousand tokens",
     "Output tokens in the week, high end of the inferred range, in thousands"),
    ("profile.new_input_tokens", "new_input_tokens", None, _M, "million tokens",
     "New (uncached) input tokens in the week, central value of the inferred split, in millions"),
    ("profile.new_input_tokens_low", "new_input_tokens_range", 0, _M, "million tokens",
     "New input tokens in the week, low end of the inferred range, in millions"),
    ("profile.new_input_tokens_high", "new_input_tokens_range", 1, _M, "million tokens",
     "New input tokens in the week, high end of the inferred range, in millions"),
    ("profile.cached_read_tokens", "cached_read_tokens", None, _M, "million tokens",
     "Cached context reads in the week (the re-read ratio times the output), in millions"),
    ("profile.window_hours", "window_hours_in_period", None, fmt_int, "hours",
     "Hours of working window in the profile's week (active days times the daily window)"),
)
for _name, _field, _at, _fmt, _unit, _what in _PROFILE:
    claim(_name, experiment=CAP, files=["profile.json"], fmt=_fmt, unit=_unit, description=_what)(
        lambda src, _f=_field, _e=_at: _end(_computed(src)[_f], _e))


@claim("profile.split_kind", experiment=CAP, files=["profile.json"], fmt="{}", unit="")
def _split_kind(src: Sources) -> str:
    """Whether the week's split into output and new input was published or inferred here."""
    return str(_computed(src)["split"])


for _name, _key, _fmt, _unit in (("profile.hours_generating_published", "hours_generating", fmt_sig(2), "hours"),
                                 ("profile.q_published", "q", fmt_pct(1), "probability"),
                                 ("profile.fraction_of_week_published", "fraction_of_period", fmt_pct(1), "fraction")):
    claim(_name, experiment=CAP, files=["profile.json"], fmt=_fmt, unit=_unit,
          description=f"{_key.replace('_', ' ')} as published (n/a when the profile publishes none)")(
        lambda src, _k=_key: _published(src, _k))


# -- capacity: seats and pods ----------------------------------------------------------------------------------------

def _seats_at(alpha: Any) -> Callable[[Sources], int]:
    return lambda src: int(_row(src.csv("seats.csv"), alpha=alpha, rho=0.0)["seats"])


claim("seats.rule", experiment=CAP, files=["seats.csv"], fmt=fmt_int, unit="developers",
      description="The largest team one pod serves at the seat rule's α (binomial)")(_seats_at(RULE))
claim("seats.alpha_1pct", experiment=CAP, files=["seats.csv"], fmt=fmt_int, unit="developers",
      description="The largest team one pod serves with α = 1% (binomial; n/a without that α)")(_seats_at(0.01))
claim("seats.alpha_5pct", experiment=CAP, files=["seats.csv"], fmt=fmt_int, unit="developers",
      description="The largest team one pod serves with α = 5% (binomial; n/a without that α)")(_seats_at(0.05))


def _team_value(column: str, team: int, alpha: Any) -> Callable[[Sources], Any]:
    return lambda src: _row(_team_rows(src.csv("teams.csv"), team), alpha=alpha, team=team, label="published")[column]


for _n in (20, 100, 250):
    claim(f"pods.team_{_n}", experiment=CAP, files=["teams.csv"], fmt=fmt_int, unit="pods",
          description=f"Pods (streams pooled) for a team of {_n} with α = 1%")(_team_value("pods", _n, RULE))
    claim(f"pods.team_{_n}_alpha_5pct", experiment=CAP, files=["teams.csv"], fmt=fmt_int, unit="pods",
          description=f"Pods (streams pooled) for a team of {_n} with α = 5%")(_team_value("pods", _n, 0.05))
    claim(f"pods.partitioned_team_{_n}", experiment=CAP, files=["teams.csv"], fmt=fmt_int, unit="pods",
          description=f"Pods for a team of {_n} with each developer pinned to one pod, α = 1%")(
        _team_value("pods_partitioned", _n, RULE))
    claim(f"streams.team_{_n}", experiment=CAP, files=["teams.csv"], fmt=fmt_int, unit="streams",
          description=f"Streams a team of {_n} needs with α = 1%")(_team_value("streams_needed", _n, RULE))


@claim("pods.team_250_overflow", experiment=CAP, files=["teams.csv"], fmt=fmt_pct_sig(2), unit="probability")
def _overflow_250(src: Sources) -> float:
    """Chance that more of a team of 250 generate at once than its pods have streams (α = 1%)."""
    return float(_row(_team_rows(src.csv("teams.csv"), 250), alpha=RULE, team=250,
                      label="published")["overflow_probability"])


@claim("pods.curve_max_team", experiment=CAP, files=[MANIFEST], fmt=fmt_int, unit="developers")
def _curve_max_team(src: Sources) -> int:
    """Pods were computed for every team size up to this."""
    return int(src.parameters["max_team"])


# -- capacity: volume ------------------------------------------------------------------------------------------------

def _volume(column: str, utilization: float) -> Callable[[Sources], Any]:
    return lambda src: _row(src.csv("volume.csv"), utilization=utilization)[column]


claim("volume.seats_full", experiment=CAP, files=["volume.csv"], fmt=fmt_int, unit="developers",
      description="Developers one pod's monthly output covers at full utilization")(
    lambda src: int(_volume("seats_by_volume", 1.0)(src)))
claim("volume.seats_half", experiment=CAP, files=["volume.csv"], fmt=fmt_int, unit="developers",
      description="Developers one pod's monthly output covers at half utilization")(
    lambda src: int(_volume("seats_by_volume", 0.5)(src)))
claim("volume.gap_full", experiment=CAP, files=["volume.csv"], fmt=lambda v: f"{float(v):.0f}", unit="ratio",
      description="Seats by volume at full utilization over seats by concurrency at α = 1%")(
    lambda src: float(_volume("volume_over_concurrency", 1.0)(src)))
claim("volume.pod_output_tok_s", experiment=CAP, files=["volume.csv"], fmt=fmt_int, unit="tokens/s",
      description="A pod's total output rate at its provisioning load (published, or measured)")(
    lambda src: float(_volume("pod_output_tok_s", 1.0)(src)))
claim("volume.pod_tokens_per_month", experiment=CAP, files=["volume.csv"],
      fmt=lambda v: f"{float(v) / 1e6:,.0f}", unit="million tokens",
      description="A pod's output over a month at full utilization, in millions of tokens")(
    lambda src: float(_volume("pod_output_tokens_per_month", 1.0)(src)))
claim("volume.hours_per_month", experiment=CAP, files=["volume.csv"], fmt=fmt_int, unit="hours",
      description="Hours in the month the volume figures use")(
    lambda src: float(_volume("hours_per_month", 1.0)(src)))
for _end_name, _suffix in (("", ""), (" (low end of the inferred split)", "_low"),
                          (" (high end of the inferred split)", "_high")):
    claim(f"volume.developer_tokens_per_month{_suffix}", experiment=CAP, files=["volume.csv"],
          fmt=lambda v: f"{float(v) / 1e6:,.2f}", unit="million tokens",
          description=f"One developer's output tokens over a month, in millions{_end_name}")(
        lambda src, _s=_suffix: float(_volume(f"developer_output_tokens_per_month{_s}", 1.0)(src)))
    for _u, _w in ((1.0, "full"), (0.5, "half")):
        if _suffix:
            claim(f"volume.seats_{_w}{_suffix}", experiment=CAP, files=["volume.csv"], fmt=fmt_int,
                  unit="developers",
                  description=f"Developers one pod's monthly output covers at {_w} utilization{_end_name}")(
                lambda src, _s=_suffix, _uu=_u: int(_volume(f"seats_by_volume{_s}", _uu)(src)))


# -- capacity: correlation -------------------------------------------------------------------------------------------

def _rho_example(src: Sources) -> float:
    return float(src.parameters.get("rho_example", 0.05))


@claim("correlation.rho_example", experiment=CAP, files=[MANIFEST], fmt="{:g}", unit="")
def _rho(src: Sources) -> float:
    """The intra-team correlation the text uses as its example."""
    return _rho_example(src)


@claim("correlation.seats_rho_example", experiment=CAP, files=["correlation.csv", MANIFEST], fmt=fmt_int,
       unit="developers")
def _seats_rho(src: Sources) -> int:
    """The largest team one pod serves with α = 1% at the example correlation (beta-binomial)."""
    return int(_row(src.csv("correlation.csv"), rho=_rho_example(src), alpha=RULE)["seats_per_pod"])


@claim("correlation.pods_team_250_rho_example", experiment=CAP, files=["correlation.csv", MANIFEST],
       fmt=fmt_int, unit="pods")
def _pods_rho(src: Sources) -> int:
    """Pods for a team of 250 with α = 1% at the example correlation."""
    row = _row(src.csv("correlation.csv"), rho=_rho_example(src), alpha=RULE)
    if "pods_team_250" not in row:
        raise NotApplicable("no team of 250 in this campaign")
    return int(row["pods_team_250"])


@claim("correlation.rho_max", experiment=CAP, files=["correlation.csv"], fmt="{:g}", unit="")
def _rho_max(src: Sources) -> float:
    """The largest intra-team correlation tabulated."""
    return float(src.csv("correlation.csv")["rho"].max())


@claim("correlation.seats_rho_max", experiment=CAP, files=["correlation.csv"], fmt=fmt_int, unit="developers")
def _seats_rho_max(src: Sources) -> int:
    """The largest team one pod serves with α = 1% at the largest correlation tabulated."""
    f = src.csv("correlation.csv")
    return int(_row(f, rho=float(f["rho"].max()), alpha=RULE)["seats_per_pod"])


# -- capacity: simulation --------------------------------------------------------------------------------------------

def _sim(column: str, scenario: str) -> Callable[[Sources], Any]:
    def f(src: Sources) -> Any:
        frame = src.csv("simulation.csv")
        if not (frame["scenario"] == scenario).any():  # shared_schedule runs only with a schedule_shape
            raise NotApplicable(f"no {scenario} scenario was simulated")
        return _row(frame, scenario=scenario)[column]

    return f


claim("sim.days", experiment=CAP, files=["simulation.csv"], fmt=fmt_int, unit="days",
      description="Working days simulated")(lambda src: int(_sim("days", "independent")(src)))
claim("sim.weeks", experiment=CAP, files=["simulation.csv"], fmt=fmt_int, unit="weeks",
      description="Weeks simulated")(lambda src: int(_sim("weeks", "independent")(src)))
claim("sim.developers", experiment=CAP, files=["simulation.csv"], fmt=fmt_int, unit="developers",
      description="Team size simulated")(lambda src: int(_sim("developers", "independent")(src)))
claim("sim.streams", experiment=CAP, files=["simulation.csv"], fmt=fmt_int, unit="streams",
      description="Streams of the simulated team's pods (α = 1%, binomial)")(
    lambda src: int(_sim("streams", "independent")(src)))
claim("sim.step_seconds", experiment=CAP, files=["simulation.csv"], fmt=fmt_sig(2), unit="s",
      description="Time step of the simulation")(lambda src: float(_sim("step_seconds", "independent")(src)))
claim("sim.session_hours", experiment=CAP, files=["simulation.csv"], fmt=fmt_sig(2), unit="hours",
      description="Session length assumed in the simulation")(lambda src: float(_sim("session_hours", "sessions")(src)))
for _sc in ("independent", "sessions", "shared_days", "shared_schedule"):
    claim(f"sim.overflow_{_sc}", experiment=CAP, files=["simulation.csv"], fmt=fmt_pct_sig(2), unit="probability",
          description=f"Simulated share of the window with more generating than streams ({_sc})")(
        _sim("simulated_overflow", _sc))
    claim(f"sim.closed_{_sc}", experiment=CAP, files=["simulation.csv"], fmt=fmt_pct_sig(2), unit="probability",
          description=f"The closed form's P(more generating than streams) for the {_sc} scenario")(
        _sim("closed_form_overflow", _sc))
    claim(f"sim.se_{_sc}", experiment=CAP, files=["simulation.csv"], fmt=fmt_pct_sig(1), unit="probability",
          description=f"Standard error of the simulated share ({_sc}), from the spread between days")(
        _sim("standard_error", _sc))
    claim(f"sim.overload_seconds_{_sc}", experiment=CAP, files=["simulation.csv"], fmt=fmt_sig(2), unit="s",
          description=f"Mean length of an overload in the simulation ({_sc})")(_sim("mean_overload_seconds", _sc))
    claim(f"sim.days_with_overflow_{_sc}", experiment=CAP, files=["simulation.csv"], fmt=fmt_int, unit="days",
          description=f"Simulated days with at least one overload ({_sc})")(
        lambda src, _sc=_sc: int(_sim("days_with_overflow", _sc)(src)))


# -- cost --------------------------------------------------------------------------------------------------------------

def _cost(key: str) -> Callable[[Sources], Any]:
    return lambda src: src.json("cost.json")[key]


claim("cost.pod_price_per_hour", experiment=COST, files=["cost.json"], fmt=fmt_price, unit="currency/hour",
      description="Pod price an hour, in cost.currency (published, or a stack file's price)")(
    _cost("pod_price_per_hour"))
claim("cost.hours_per_month", experiment=COST, files=["cost.json"], fmt=fmt_int, unit="hours",
      description="Hours a pod is billed a month (stated: 24 × 365 / 12)")(_cost("hours_per_month"))
claim("cost.pod_price_per_month", experiment=COST, files=["cost.json"], fmt=fmt_int, unit="currency/month",
      description="A pod's month, run day and night, in cost.currency")(_cost("pod_price_per_month"))
claim("cost.seat_price_per_month", experiment=COST, files=["cost.json"], fmt=fmt_int, unit="currency/month",
      description="A subscription seat's month, in cost.currency (published, or the campaign file's)")(
    _cost("seat_price_per_month"))
claim("cost.break_even_seats", experiment=COST, files=["cost.json"], fmt=fmt_sig(3), unit="subscriptions",
      description="Subscriptions that cost as much a month as one pod")(_cost("break_even_seats"))


@claim("cost.break_even_team", experiment=COST, files=["cost.json"], fmt=fmt_int, unit="developers")
def _be_team(src: Sources) -> int:
    """The smallest team for which self-hosting costs no more than subscriptions (α = 1%)."""
    c = src.json("cost.json")
    v = c["break_even_team"][str(c.get("alpha", 0.01))]
    if v is None:  # the text then says that no team breaks even at these prices
        raise NotApplicable("no team size breaks even")
    return int(v)


def _costed(column: str, team: int, alpha: Any = RULE) -> Callable[[Sources], Any]:
    return lambda src: _row(_team_rows(src.csv("costed_teams.csv"), team), alpha=alpha, team=team,
                            label="published")[column]


for _n in (20, 100, 250):
    claim(f"cost.saving_team_{_n}", experiment=COST, files=["costed_teams.csv"], fmt=fmt_pct(1), unit="fraction",
          description=f"Share of the subscription bill a team of {_n} saves by self-hosting (α = 1%)")(
        _costed("saving_fraction", _n))
    claim(f"cost.self_hosted_team_{_n}", experiment=COST, files=["costed_teams.csv"], fmt=fmt_int,
          unit="currency/month", description=f"Monthly cost of the pods for a team of {_n} (α = 1%)")(
        _costed("self_hosted_per_month", _n))
    claim(f"cost.subscriptions_team_{_n}", experiment=COST, files=["costed_teams.csv"], fmt=fmt_int,
          unit="currency/month", description=f"Monthly cost of subscriptions for a team of {_n}")(
        _costed("subscriptions_per_month", _n))
    claim(f"cost.saving_team_{_n}_alpha_5pct", experiment=COST, files=["costed_teams.csv"], fmt=fmt_pct(1),
          unit="fraction", description=f"Share a team of {_n} saves by self-hosting with α = 5%")(
        _costed("saving_fraction", _n, 0.05))


@claim("cost.extra_team_20", experiment=COST, files=["costed_teams.csv"], fmt=fmt_pct(0), unit="fraction")
def _extra_20(src: Sources) -> float:
    """How much more than subscriptions a team of 20 pays for its pods (α = 1%); negative if it saves."""
    return -float(_costed("saving_fraction", 20)(src))


def _sens(varied: str, factor: float | None, column: str, value: float | None = None) -> Callable[[Sources], Any]:
    def f(src: Sources) -> Any:
        t = src.csv("sensitivity.csv")
        t = t[t["varied"] == varied]
        if factor is not None:
            t = t[(t["factor"] - factor).abs() < 1e-9]
        else:
            t = t[(t["value"] - value).abs() < 1e-12]
        if len(t) != 1:
            raise ValueError(f"sensitivity.csv has {len(t)} rows for {varied} at {factor or value}")
        if column not in t.columns:
            raise NotApplicable(f"sensitivity.csv has no {column}: the campaign costs other teams")
        return t.iloc[0][column]

    return f


claim("sensitivity.saving_team_250_q_double", experiment=COST, files=["sensitivity.csv"], fmt=fmt_pct(1),
      unit="fraction", description="Saving of a team of 250 if q were twice the value used")(
    _sens("q", 2.0, "saving_fraction_team_250"))
claim("sensitivity.saving_team_250_q_half", experiment=COST, files=["sensitivity.csv"], fmt=fmt_pct(1),
      unit="fraction", description="Saving of a team of 250 if q were half the value used")(
    _sens("q", 0.5, "saving_fraction_team_250"))
claim("sensitivity.saving_team_250_pod_price_double", experiment=COST, files=["sensitivity.csv"], fmt=fmt_pct(1),
      unit="fraction", description="Saving of a team of 250 if the pod cost twice as much")(
    _sens("pod_price_per_hour", 2.0, "saving_fraction_team_250"))
claim("sensitivity.saving_team_100_pod_price_double", experiment=COST, files=["sensitivity.csv"], fmt=fmt_pct(1),
      unit="fraction", description="Saving of a team of 100 if the pod cost twice as much")(
    _sens("pod_price_per_hour", 2.0, "saving_fraction_team_100"))


def _strictest_alpha_row(src: Sources) -> Any:
    return src.csv("sensitivity.csv").query("varied == 'alpha'").sort_values("value").iloc[0]


@claim("sensitivity.alpha_strict", experiment=COST, files=["sensitivity.csv"], fmt=lambda v: f"{100 * float(v):g}%",
       unit="probability")
def _alpha_strict(src: Sources) -> float:
    """The strictest α in the sensitivity analysis."""
    return float(_strictest_alpha_row(src)["value"])


@claim("sensitivity.seats_alpha_strict", experiment=COST, files=["sensitivity.csv"], fmt=fmt_int, unit="developers")
def _seats_alpha_strict(src: Sources) -> int:
    """The largest team one pod serves under the strictest α of the sensitivity analysis."""
    return int(_strictest_alpha_row(src)["seats_per_pod"])


@claim("sensitivity.rho_example", experiment=COST, files=[MANIFEST], fmt="{:g}", unit="")
def _sens_rho(src: Sources) -> float:
    """The intra-team correlation the cost text quotes."""
    return float(src.parameters.get("rho_example", 0.05))


@claim("sensitivity.saving_team_250_rho_example", experiment=COST, files=["sensitivity.csv", MANIFEST],
       fmt=fmt_pct(1), unit="fraction")
def _sens_rho_saving(src: Sources) -> float:
    """Saving of a team of 250 at the quoted intra-team correlation (α = 1%)."""
    return float(_sens("rho", None, "saving_fraction_team_250", float(src.parameters.get("rho_example", 0.05)))(src))


# The published figures these claims print (as inputs used, or as published beside the recomputed ones), for the
# closing table of every published figure.
for _fig, _claims in {
    "pod_eur_per_hour": ["cost.pod_price_per_hour"], "seat_eur_per_month": ["cost.seat_price_per_month"],
    "streams_per_pod": ["capacity.streams_per_pod"], "alpha": ["capacity.alpha"], "alpha_also": ["capacity.alpha_also"],
    "team_sizes": ["teams.small", "teams.medium", "teams.large"], "bar_tok_s_per_stream": ["capacity.bar_tok_s"],
    "week_hours_generating": ["profile.hours_generating_published", "profile.hours_generating"],
    "week_fraction_generating": ["profile.fraction_of_week_published", "profile.fraction_of_week"],
    "week_q": ["profile.q_published", "profile.q_computed", "capacity.q"],
    "week_window_hours": ["profile.window_hours"], "agents_4_total_tok_s": ["volume.pod_output_tok_s"],
}.items():
    CITES.setdefault(_fig, []).extend(_claims)
