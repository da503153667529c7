"""Several developers make a team (issue 32): each keeps their own q, and the team's streams come from the
Poisson-binomial of their unequal q; checked against scipy's binomial where every q is equal, and against brute
force where they differ. A team export is never read as one developer."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from scipy import stats

from offload_lab.cli.main import main
from offload_lab.core.errors import InputError
from offload_lab.seats import capacity, team
from offload_lab.seats.usage_export import load_team_usage, load_usage


def test_equal_q_is_the_binomial():
    for n, q in ((25, 0.071), (7, 0.3), (120, 0.02)):
        qs = [q] * n
        assert np.allclose(team.pmf(qs), stats.binom.pmf(np.arange(n + 1), n, q))
        assert team.streams_needed(qs, 0.01) == capacity.streams_for_team(n, capacity.Demand(q), 0.01)


def test_unequal_q_by_brute_force():
    qs = [0.05, 0.3, 0.12, 0.5, 0.08]
    brute = np.zeros(len(qs) + 1)
    for bits in itertools.product((0, 1), repeat=len(qs)):
        brute[sum(bits)] += np.prod([q if b else 1 - q for q, b in zip(qs, bits)])
    assert np.allclose(team.pmf(qs), brute)
    s = team.streams_needed(qs, 0.05)
    assert brute[s + 1:].sum() <= 0.05 < brute[s:].sum()
    with pytest.raises(InputError):
        team.pmf([0.1, 1.5])


def _day(date, out, new, cached):
    return {"date": date, "inputTokens": new, "outputTokens": out, "cacheCreationTokens": 0, "cacheReadTokens": cached,
            "totalTokens": out + new + cached, "totalCost": 0.0, "modelsUsed": [], "modelBreakdowns": []}


@pytest.fixture
def team_export(tmp_path):
    devs = {
        "ana": {"daily": [_day("2026-11-02", 200_000, 400_000, 9_000_000), _day("2026-11-03", 150_000, 300_000, 8e6)]},
        "ben": {"daily": [_day("2026-11-02", 20_000, 40_000, 900_000)]},
        "cai": {"daily": [_day("2026-11-02", 90_000, 100_000, 3_000_000), _day("2026-11-06", 80_000, 90_000, 2e6)]},
    }
    p = tmp_path / "team.json"
    p.write_text(json.dumps({"developers": devs}))
    return p


def test_a_team_export_gives_each_developer_their_q(team_export, capsys):
    devs = load_team_usage([team_export])
    assert [n for n, _, _ in devs] == ["ana", "ben", "cai"]
    with pytest.raises(InputError, match="3 developers"):
        load_usage(team_export)
    assert main(["capacity", "--profile", str(team_export), "--stream-tok-s", "40", "--prefill-tok-s", "3000",
                 "--streams-per-pod", "4", "--alpha", "0.01", "--pod-price", "2.5", "--seat-price", "200",
                 "--currency", "USD", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["model"] == "poisson-binomial" and r["team"] == 3 and r["currency"] == "USD"
    qs = [d["q"] for d in r["developers"]]
    assert len(set(round(q, 6) for q in qs)) == 3
    assert r["streams_needed"] == team.streams_needed(qs, 0.01)
    # a single developer's profile stays the binomial path
    assert main(["capacity", "--profile", str(team_export), "--stream-tok-s", "40", "--streams-per-pod", "4",
                 "--alpha", "0.01", "--pod-price", "2.5", "--seat-price", "200", "--team", "5"]) == 2
    assert "3 developers" in capsys.readouterr().err


def test_prices_carry_their_currency_and_the_old_flags_still_work(capsys):
    assert main(["capacity", "--q", "0.071", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "30",
                 "--pod-price", "2.50", "--seat-price", "200", "--currency", "USD"]) == 0
    out = capsys.readouterr().out
    assert "USD a month" in out and "EUR" not in out
    assert main(["capacity", "--q", "0.071", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "30",
                 "--pod-eur-per-hour", "3.73", "--seat-eur-per-month", "180", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["currency"] == "EUR" and r["pods"] == 2
    assert main(["capacity", "--q", "0.071", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "30",
                 "--pod-eur-per-hour", "3.73", "--seat-eur-per-month", "180", "--currency", "USD"]) == 2
    assert main(["capacity", "--q", "0.071", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "30",
                 "--pod-price", "3.73"]) == 2
    assert "--seat-price" in capsys.readouterr().err
