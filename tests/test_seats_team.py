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


# -- correlated demand on top of the Poisson-binomial -------------------------------------------------------------

def test_correlated_equal_q_is_scipys_beta_binomial():
    for n, q, rho in ((30, 0.071, 0.05), (12, 0.3, 0.2), (250, 0.071, 0.02)):
        k = (1 - rho) / rho
        want = stats.betabinom.pmf(np.arange(n + 1), n, q * k, (1 - q) * k)
        assert np.allclose(team.pmf([q] * n, rho), want, atol=1e-12)
        d = capacity.Demand(q, rho)
        assert team.streams_needed([q] * n, 0.01, rho) == capacity.streams_for_team(n, d, 0.01)
    assert np.allclose(team.pmf([0.1, 0.3, 0.05], 0.0), team.pmf([0.1, 0.3, 0.05]))


def test_correlated_unequal_q_against_an_integral_of_the_brute_force():
    """The day level integrated by scipy's adaptive quadrature over the Beta density, each day's law enumerated
    over every subset of developers: nothing shared with the Gauss-Jacobi convolution but the model."""
    from scipy import integrate

    qs, rho = [0.05, 0.3, 0.12, 0.5, 0.08], 0.15
    mean, k = float(np.mean(qs)), (1 - rho) / rho
    beta = stats.beta(mean * k, (1 - mean) * k)

    def day_law(b: float, count: int) -> float:
        chance = [min(1.0, q * b / mean) for q in qs]
        return sum(np.prod([c if bit else 1 - c for c, bit in zip(chance, bits)])
                   for bits in itertools.product((0, 1), repeat=len(qs)) if sum(bits) == count)

    # split where the cap at 1 bends the integrand (b = mean / q for each q), so that quad sees smooth pieces
    cuts = sorted({0.0, 1.0, *(min(1.0, mean / q) for q in qs)})
    want = [sum(integrate.quad(lambda b: beta.pdf(b) * day_law(b, c), lo, hi, limit=200)[0]
                for lo, hi in zip(cuts, cuts[1:])) for c in range(len(qs) + 1)]
    assert np.allclose(team.pmf(qs, rho, nodes=400), want, atol=2e-4)
    assert team.pmf(qs, rho).sum() == pytest.approx(1.0)
    # correlation fattens the tail: never fewer streams than for independent developers
    assert team.streams_needed(qs, 0.05, rho) >= team.streams_needed(qs, 0.05)


def test_the_simulation_agrees_with_the_integral_within_its_sampling_error():
    qs = np.random.default_rng(7).uniform(0.02, 0.2, 40)
    rho, streams = 0.1, 8
    sim = team.simulate(qs, rho, days=1500, moments_per_day=40, seed=11)
    exact = team.sf(streams, qs, rho)
    assert abs(sim.overflow_probability(streams) - exact) < 4 * sim.overflow_standard_error(streams)
    assert sim.overflow_probability(streams) > team.sf(streams, qs)  # above the independent tail, as the model is
    assert team.simulate(qs, rho, 5, 10, seed=3).day_counts.tolist() == team.simulate(qs, rho, 5, 10,
                                                                                        seed=3).day_counts.tolist()
    with pytest.raises(InputError, match="rho"):
        team.pmf(qs, 1.0)


def test_several_developers_with_correlation_from_the_command_line(team_export, capsys):
    argv = ["capacity", "--profile", str(team_export), "--stream-tok-s", "40", "--prefill-tok-s", "3000",
            "--streams-per-pod", "1", "--alpha", "0.05", "--pod-price", "2.5", "--seat-price", "200",
            "--currency", "USD", "--json"]
    assert main(argv) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main([*argv, "--rho", "0.3"]) == 0
    r = json.loads(capsys.readouterr().out)
    qs = [d["q"] for d in r["developers"]]
    assert r["model"] == "poisson-binomial, correlated" and r["rho"] == 0.3
    assert r["streams_needed"] == team.streams_needed(qs, 0.05, 0.3) >= alone["streams_needed"]
    assert r["overflow_probability"] == pytest.approx(team.sf(r["pods"], qs, 0.3))
