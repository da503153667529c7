"""Money: a pod's month, break-even, team bills and savings, sensitivity, and the `capacity` command's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload_lab.seats import capacity
from offload_lab.cli import main as cli
from offload_lab.seats import cost
from offload_lab.seats.capacity import Demand
from offload_lab.core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
CLI_KEYS = {"seats_per_pod", "pods", "currency", "pod_price_per_month", "break_even_seats",
            "team_self_hosted_per_month", "team_subscriptions_per_month", "saving_fraction"}


def test_hours_a_month_are_stated_and_used():
    assert cost.HOURS_PER_MONTH == 24 * 365 / 12
    p = cost.Prices(pod_price_per_hour=2.0, seat_price_per_month=50.0, currency="usd")
    assert p.currency == "USD"
    assert p.pod_price_per_month == pytest.approx(2.0 * 24 * 365 / 12)
    assert p.break_even_seats == pytest.approx(p.pod_price_per_month / 50.0)
    assert cost.Prices(1.0, 10.0, hours_per_month=100, currency="EUR").pod_price_per_month == pytest.approx(100)
    with pytest.raises(TypeError):  # a price never travels without its currency
        cost.Prices(1.0, 10.0)


def test_team_cost_and_saving_fraction():
    p = cost.Prices(1.0, 30.0, hours_per_month=100, currency="USD")  # a pod: 100 a month; a seat: 30
    c = cost.team_cost(10, 2, p)
    assert (c.self_hosted_per_month, c.subscriptions_per_month, c.currency) == (200, 300, "USD")
    assert c.difference_per_month == 100 and c.saving_fraction == pytest.approx(1 / 3)
    assert c.to_dict()["currency"] == "USD" and not any("eur" in k for k in c.to_dict())
    assert cost.team_cost(2, 1, p).saving_fraction == pytest.approx((60 - 100) / 60)  # negative: pods cost more


def test_break_even_team_hand_checked():
    p = cost.Prices(1.0, 30.0, hours_per_month=100, currency="EUR")  # 3.33 subscriptions pay for a pod
    # q small enough that one pod of 4 streams serves well over 4: the first team that saves is 4.
    assert cost.break_even_team(4, Demand(0.01), 0.01, p) == 4
    # Every developer always generating, one stream a pod: a pod a developer, never cheaper than a seat.
    assert cost.break_even_team(1, Demand(1.0), 0.01, p, max_team=50) is None


def test_team_costs_table_uses_the_pod_search():
    p = cost.Prices(3.0, 100.0, currency="USD")
    t = cost.team_costs([1, 50, 200], 4, Demand(0.071), 0.01, p)
    assert set(t["currency"]) == {"USD"}
    for _, row in t.iterrows():
        assert row["pods"] == capacity.pods_for_team(int(row["team"]), 4, Demand(0.071), 0.01)
        assert row["self_hosted_per_month"] == pytest.approx(row["pods"] * p.pod_price_per_month)


def test_sensitivity_moves_the_right_way():
    base = cost.Scenario(q=0.071, alpha=0.01, streams_per_pod=4, pod_price_per_hour=3.0, seat_price_per_month=150.0,
                         currency="EUR")
    t = cost.sensitivity(base, {"q": [0.035, 0.071, 0.14], "pod_price_per_hour": [1.5, 3.0, 6.0],
                                "alpha": [0.001, 0.01, 0.05], "rho": [0.0, 0.05]}, teams=[100])
    assert len(t) == 11 and t["is_base"].sum() == 4
    by = {k: g.sort_values("value") for k, g in t.groupby("varied")}
    assert by["q"]["seats_per_pod"].is_monotonic_decreasing
    assert by["q"]["saving_fraction_team_100"].is_monotonic_decreasing
    assert by["pod_price_per_hour"]["saving_fraction_team_100"].is_monotonic_decreasing
    assert by["alpha"]["seats_per_pod"].is_monotonic_increasing
    assert by["rho"]["pods_team_100"].is_monotonic_increasing
    with pytest.raises(InputError, match="not an input"):
        cost.sensitivity(base, {"colour": [1]}, teams=[1])


@pytest.mark.parametrize("kwargs", [dict(pod_price_per_hour=0, seat_price_per_month=1),
                                    dict(pod_price_per_hour=1, seat_price_per_month=-1),
                                    dict(pod_price_per_hour=1, seat_price_per_month=1, hours_per_month=800),
                                    dict(pod_price_per_hour=1, seat_price_per_month=1, currency="euro")])
def test_bad_prices_rejected(kwargs):
    with pytest.raises(InputError):
        cost.Prices(**{"currency": "EUR", **kwargs})


def test_capacity_command_json(capsys):
    rc = cli.main(["capacity", "--q", "0.071", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "100",
                   "--pod-eur-per-hour", "3.73", "--seat-eur-per-month", "180", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert CLI_KEYS <= set(out)
    d = Demand(0.071)
    assert out["seats_per_pod"] == capacity.seats_for_streams(4, d, 0.01)
    assert out["pods"] == capacity.pods_for_team(100, 4, d, 0.01)
    prices = cost.Prices(3.73, 180, currency="EUR")
    assert out["currency"] == "EUR"
    assert out["pod_price_per_month"] == pytest.approx(prices.pod_price_per_month)
    assert out["break_even_seats"] == pytest.approx(prices.break_even_seats)
    assert out["team_self_hosted_per_month"] == pytest.approx(out["pods"] * prices.pod_price_per_month)
    assert out["team_subscriptions_per_month"] == pytest.approx(100 * 180)
    assert out["saving_fraction"] == pytest.approx(1 - out["team_self_hosted_per_month"] / (100 * 180))


def test_capacity_command_with_correlation_and_profile(capsys):
    base = ["--streams-per-pod", "4", "--alpha", "0.01", "--team", "250", "--pod-eur-per-hour", "3.73",
            "--seat-eur-per-month", "180", "--json"]
    assert cli.main(["capacity", "--q", "0.071", "--rho", "0.05", *base]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "beta-binomial" and out["pods"] == capacity.pods_for_team(250, 4, Demand(0.071, 0.05), 0.01)
    profile = str(ROOT / "configs/profiles/published-week.yaml")
    # The published profile's split is inferred from its hours, which needs a prefill rate too (issue 12).
    assert cli.main(["capacity", "--profile", profile, "--stream-tok-s", "40", "--prefill-tok-s", "2000",
                     *base]) == 0
    assert json.loads(capsys.readouterr().out)["q_from"].startswith("profile")


@pytest.mark.parametrize("argv,words", [
    (["--q", "0", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "5"], "argument --q: 0 is out of range"),
    (["--q", "0.1", "--streams-per-pod", "4", "--alpha", "1.5", "--team", "5"], "argument --alpha"),
    (["--q", "0.1", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "0"], "argument --team"),
    (["--profile", "configs/profiles/published-week.yaml", "--streams-per-pod", "4", "--alpha", "0.01",
      "--team", "5"], "--stream-tok-s"),
])
def test_capacity_command_bad_input_exits_2(argv, words, capsys):
    rc = cli.main(["capacity", *argv, "--pod-eur-per-hour", "3", "--seat-eur-per-month", "100"])
    assert rc == 2 and words in capsys.readouterr().err


def test_the_capacity_query_without_the_command_line():
    from offload_lab.seats import commands

    query = commands.CapacityQuery(q=0.071, streams_per_pod=4, alpha=0.01, team=30, pod_price=2.5, seat_price=200,
                                   currency="usd")
    out = commands.capacity(query)
    want = cost.quote(0.071, 4, 0.01, 30, cost.Prices(2.5, 200, currency="USD"))
    assert {k: out.payload[k] for k in want} == want and out.payload["currency"] == "USD"
    assert all("EUR" not in line for line in out.lines) and "3,650.00 USD a month" in out.lines[-1]
    with pytest.raises(InputError, match="give q or a usage profile"):
        commands.capacity(commands.CapacityQuery(streams_per_pod=4, alpha=0.01, team=3, pod_price=1, seat_price=1))
    with pytest.raises(ValueError, match="per-stream output rate"):
        commands.CapacityQuery(profile=["x.json"], streams_per_pod=4, alpha=0.01, pod_price=1, seat_price=1)
