"""Experiment ``cost``: a pod's month against subscriptions, for teams of every size, from a campaign's ``published``
run or, with ``source: measured``, its own runs, the stack file's price and the campaign file's seat price — no
server.

Files written into the run (derived by :mod:`offload_lab.seats.cost` and :mod:`offload_lab.seats.capacity`):

===================  ===============================================================================================
``inputs.json``      every input, its value and where it came from
``cost.json``        hours a month (stated), the pod's month, break-even in subscriptions and in team size, per α
``costed_teams.csv`` the published team sizes and the largest team one pod serves: pods, both bills, saving, per α
``teams.csv``        the same for every team from 1 to ``max_team_plot`` (the cost figure)
``sensitivity.csv``  seats, pods and savings as q, the pod price, the subscription, α and ρ vary one at a time
===================  ===============================================================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.seats import capacity, cost
from offload_lab.core import runs
from offload_lab.seats.capacity import Demand
from offload_lab.experiments.cost.params import Params as CostParams
from offload_lab.published.study_inputs import StudyInputs, gather_for

EXPERIMENT = "cost"


def base_scenario(inp: StudyInputs, hours_per_month: float) -> cost.Scenario:
    return cost.Scenario(q=inp.q, alpha=inp.alpha, streams_per_pod=inp.streams_per_pod,
                         pod_price_per_hour=inp.price_or_fail(), seat_price_per_month=inp.seat_price_per_month,
                         currency=inp.currency, hours_per_month=hours_per_month)


def costed_teams(inp: StudyInputs, prices: cost.Prices) -> pd.DataFrame:
    d = Demand(inp.q)
    rows = []
    for a in inp.alphas:
        one_pod = capacity.seats_for_streams(inp.streams_per_pod, d, a)
        for n, label in [(n, "published") for n in inp.team_sizes] + [(one_pod, "one_pod")]:
            c = cost.team_cost(n, capacity.pods_for_team(n, inp.streams_per_pod, d, a), prices)
            rows.append({"alpha": a, "label": label, **c.to_dict()})
    return pd.DataFrame(rows)


def teams_curve(inp: StudyInputs, prices: cost.Prices, max_team: int) -> pd.DataFrame:
    frames = []
    for a in inp.alphas:
        f = cost.team_costs(range(1, max_team + 1), inp.streams_per_pod, Demand(inp.q), a, prices)
        f.insert(0, "alpha", a)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def sensitivity_table(inp: StudyInputs, p: CostParams) -> pd.DataFrame:
    base = base_scenario(inp, p.hours_per_month or cost.HOURS_PER_MONTH)
    variations = {
        "q": [inp.q * f for f in p.q_factors],
        "pod_price_per_hour": [inp.price_or_fail() * f for f in p.pod_price_factors],
        "seat_price_per_month": [inp.seat_price_per_month * f for f in p.seat_price_factors],
        "alpha": sorted(set(p.alphas) | set(inp.alphas)),
        "rho": sorted(set(p.rhos) | {p.rho_example}),
    }
    table = cost.sensitivity(base, variations, inp.team_sizes)
    factors = {"q": inp.q, "pod_price_per_hour": inp.price_or_fail(), "seat_price_per_month": inp.seat_price_per_month}
    table.insert(2, "factor", [v / factors[k] if k in factors else float("nan")
                               for k, v in zip(table["varied"], table["value"])])
    return table


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: CostParams) -> dict[str, Any]:
    inp, where = gather_for(params, data_root, campaign)
    run.update(**where)
    run.write_json("inputs.json", inp.record())
    prices = cost.Prices(inp.price_or_fail(), inp.seat_price_per_month, params.hours_per_month or cost.HOURS_PER_MONTH,
                         currency=inp.currency)
    summary: dict[str, Any] = {
        "hours_per_month": prices.hours_per_month,
        "hours_per_month_rule": "set by the campaign" if params.hours_per_month
        else "24 hours × 365 days / 12 months (a pod run day and night)",
        "pod_price_per_hour": prices.pod_price_per_hour,
        "pod_price_per_month": prices.pod_price_per_month,
        "seat_price_per_month": prices.seat_price_per_month,
        "break_even_seats": prices.break_even_seats,
        "break_even_team": {str(a): cost.break_even_team(inp.streams_per_pod, Demand(inp.q), a, prices)
                            for a in inp.alphas},
        "alpha": inp.alpha,
        "alphas": inp.alphas,
        # every price above is in the seat price's currency (a pod price in another one is refused upstream)
        "currency": prices.currency,
    }
    run.write_json("cost.json", summary)
    run.write_table("costed_teams.csv", costed_teams(inp, prices))
    run.write_table("teams.csv", teams_curve(inp, prices, params.max_team_plot))
    run.write_table("sensitivity.csv", sensitivity_table(inp, params))
    return summary
