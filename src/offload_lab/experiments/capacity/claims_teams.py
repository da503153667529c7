"""Claims of seats and cost for the campaign's own team sizes, α values and currency (issue 32).

The text names no team by its size: it prints every team the campaign costs in a table (``pods.teams_table``,
``cost.teams_table``) and speaks of the largest by role (``*.team_largest``), at the campaign's own α (the seat rule's
first; every α in the tables and in ``seats.at_alphas``) and in its currency (``cost.currency``). Any number of team
sizes and of α works.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from offload_lab.core.runs import MANIFEST
from offload_lab.paper.claims import ClaimDef, NotApplicable, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_pct, table_value

CAP = "capacity"
COST = "cost"
SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


def _values(src: Sources) -> dict[str, Any]:
    return src.json("inputs.json")["values"]


def _teams(src: Sources) -> list[int]:
    return sorted(int(t) for t in _values(src)["team_sizes"])


def _largest(src: Sources) -> int:
    return _teams(src)[-1]


def _alphas(src: Sources) -> list[float]:
    """The campaign's α, the seat rule's first."""
    return [float(a) for a in _values(src)["alphas"]]


def _alpha(src: Sources, also: bool = False) -> float:
    alphas = _alphas(src)
    if also and len(alphas) < 2:
        raise NotApplicable("the campaign reports one α only")
    return alphas[1 if also else 0]


def _pct(a: float) -> str:
    return f"{100 * a:g}%"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def pick_row(frame: Any, **where: Any) -> Any:
    """The one row of ``frame`` whose columns equal ``where`` (floats to 1e-12); ValueError when not exactly one."""
    sel = frame
    for col, val in where.items():
        sel = sel[(sel[col] - val).abs() < 1e-12] if isinstance(val, float) else sel[sel[col] == val]
    if len(sel) != 1:
        raise ValueError(f"expected one row where {where}, found {len(sel)}")
    return sel.iloc[0]


def _money(v: Any) -> str:
    return f"{float(v):,.0f}"


# -- the α values ----------------------------------------------------------------------------------------------------

@claim("capacity.alphas", experiment=CAP, files=["inputs.json"], fmt="{}", unit="")
def _alphas_words(src: Sources) -> str:
    """Every α the campaign reports, the seat rule's first: '1%, 5% and 10%'."""
    return _and([_pct(a) for a in _alphas(src)])


claim("capacity.alpha_also", experiment=CAP, files=["inputs.json"], fmt=fmt_pct(0), unit="probability",
      description="The second α the campaign reports (n/a with one α)")(lambda src: _alpha(src, True))


@claim("seats.at_alphas", experiment=CAP, files=["seats.csv", "inputs.json"], fmt="{}", unit="")
def _seats_at_alphas(src: Sources) -> str:
    """The largest team one pod serves at every α of the campaign (binomial): '19 developers at α = 1% and 28 at
    α = 5%'."""
    f = src.csv("seats.csv")
    parts = [f"{fmt_int(pick_row(f, alpha=a, rho=0.0)['seats'])} at α = {_pct(a)}" for a in _alphas(src)]
    return _and([parts[0].replace(" at ", " developers at ", 1)] + parts[1:])


# -- the teams, by role ----------------------------------------------------------------------------------------------

@claim("teams.largest", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="developers")
def _largest_team(src: Sources) -> int:
    """The largest team size the campaign costs."""
    return _largest(src)


@claim("teams.count", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="teams")
def _count(src: Sources) -> int:
    """How many team sizes the campaign costs."""
    return len(_teams(src))


def _team(column: str, also: bool = False) -> Callable[[Sources], Any]:
    return lambda src: pick_row(src.csv("teams.csv"), alpha=_alpha(src, also), team=_largest(src),
                             label="published")[column]


for _name, _col, _also, _fmt, _unit, _what in (
        ("streams.team_largest", "streams_needed", False, fmt_int, "streams", "Streams the largest team needs"),
        ("pods.team_largest", "pods", False, fmt_int, "pods", "Pods (streams pooled) for the largest team"),
        ("pods.team_largest_alpha_also", "pods", True, fmt_int, "pods",
         "Pods for the largest team at the second α"),
        ("pods.partitioned_team_largest", "pods_partitioned", False, fmt_int, "pods",
         "Pods for the largest team with each developer pinned to one pod"),
        ("pods.team_largest_overflow", "overflow_probability", False, lambda v: f"{100 * float(v):.2g}%",
         "probability", "Chance the largest team's developers outnumber its pods' streams")):
    claim(_name, experiment=CAP, files=["teams.csv", "inputs.json"], fmt=_fmt, unit=_unit,
          description=f"{_what} (at the seat rule's α unless named)")(_team(_col, _also))


@claim("pods.teams_table", experiment=CAP, files=["teams.csv", "inputs.json"], kind="table")
def _pods_table(src: Sources) -> dict[str, Any]:
    """Every team size the campaign costs: streams and pods at every α, pods with developers pinned, overflow (the
    last two at the seat rule's α)."""
    f = src.csv("teams.csv")
    alphas = _alphas(src)
    rows = []
    for n in _teams(src):
        r = [pick_row(f, alpha=a, team=n, label="published") for a in alphas]
        rows.append([f"{n:,}", fmt_int(r[0]["streams_needed"]), *(fmt_int(x["pods"]) for x in r),
                     fmt_int(r[0]["pods_partitioned"]), f"{100 * float(r[0]['overflow_probability']):.2g}%"])
    return table_value(["Team", f"Streams (α = {_pct(alphas[0])})", *(f"Pods (α = {_pct(a)})" for a in alphas),
                        "Pods, pinned", "Overflow"], rows)


@claim("correlation.pods_team_largest_rho_example", experiment=CAP,
       files=["correlation.csv", "inputs.json", MANIFEST], fmt=fmt_int, unit="pods")
def _pods_rho(src: Sources) -> int:
    """Pods for the largest team at the seat rule's α and the example intra-team correlation."""
    rho = float(src.parameters.get("rho_example", 0.05))
    row = pick_row(src.csv("correlation.csv"), rho=rho, alpha=_alpha(src))
    return int(row[f"pods_team_{_largest(src)}"])


# -- cost, in the campaign's currency --------------------------------------------------------------------------------

@claim("cost.currency", experiment=COST, files=["cost.json"], fmt="{}", unit="")
def _currency(src: Sources) -> str:
    """The currency every price of the cost section is in (the campaign's)."""
    return str(src.json("cost.json")["currency"])


def _costed(column: str, also: bool = False) -> Callable[[Sources], Any]:
    return lambda src: pick_row(src.csv("costed_teams.csv"), alpha=_alpha(src, also), team=_largest(src),
                             label="published")[column]


for _name, _col, _also, _fmt, _unit, _what in (
        ("cost.self_hosted_team_largest", "self_hosted_per_month", False, _money, "currency/month",
         "Monthly cost of the largest team's pods"),
        ("cost.subscriptions_team_largest", "subscriptions_per_month", False, _money, "currency/month",
         "Monthly cost of the largest team's subscriptions"),
        ("cost.saving_team_largest", "saving_fraction", False, fmt_pct(1), "fraction",
         "Share of the subscription bill the largest team saves by self-hosting"),
        ("cost.saving_team_largest_alpha_also", "saving_fraction", True, fmt_pct(1), "fraction",
         "The same at the second α")):
    claim(_name, experiment=COST, files=["costed_teams.csv", "inputs.json"], fmt=_fmt, unit=_unit,
          description=_what)(_costed(_col, _also))


@claim("cost.teams_table", experiment=COST, files=["costed_teams.csv", "inputs.json", "cost.json"], kind="table")
def _cost_table(src: Sources) -> dict[str, Any]:
    """Every team size the campaign costs, in its currency: the pods' month at the seat rule's α, the subscriptions'
    month, and the saving at every α."""
    f = src.csv("costed_teams.csv")
    alphas, cur = _alphas(src), _currency(src)
    rows = []
    for n in _teams(src):
        r = [pick_row(f, alpha=a, team=n, label="published") for a in alphas]
        rows.append([f"{n:,}", fmt_int(r[0]["pods"]), _money(r[0]["self_hosted_per_month"]),
                     _money(r[0]["subscriptions_per_month"]), *(fmt_pct(1)(x["saving_fraction"]) for x in r)])
    return table_value(["Team", f"Pods (α = {_pct(alphas[0])})", f"Pods, {cur} a month", f"Subscriptions, {cur} a month",
                        *(f"Saving (α = {_pct(a)})" for a in alphas)], rows)


def _sens(varied: str, factor: float | None, rho_example: bool = False) -> Callable[[Sources], Any]:
    def f(src: Sources) -> Any:
        t = src.csv("sensitivity.csv")
        t = t[t["varied"] == varied]
        if rho_example:
            t = t[(t["value"] - float(src.parameters.get("rho_example", 0.05))).abs() < 1e-12]
        else:
            t = t[(t["factor"] - factor).abs() < 1e-9]
        if len(t) != 1:
            raise ValueError(f"sensitivity.csv has {len(t)} rows for {varied} at {factor}")
        return t.iloc[0][f"saving_fraction_team_{_largest(src)}"]

    return f


for _name, _varied, _factor, _rho, _what in (
        ("sensitivity.saving_team_largest_q_double", "q", 2.0, False, "if q were twice the value used"),
        ("sensitivity.saving_team_largest_q_half", "q", 0.5, False, "if q were half the value used"),
        ("sensitivity.saving_team_largest_pod_price_double", "pod_price_per_hour", 2.0, False,
         "if the pod cost twice as much"),
        ("sensitivity.saving_team_largest_rho_example", "rho", None, True, "at the example intra-team correlation")):
    claim(_name, experiment=COST, files=["sensitivity.csv", "inputs.json", MANIFEST], fmt=fmt_pct(1),
          unit="fraction", description=f"Saving of the largest team {_what}")(_sens(_varied, _factor, _rho))
