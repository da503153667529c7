"""The simulation against the closed forms where their assumptions hold, and its guards."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from offload_lab.seats.capacity import Demand
from offload_lab.core.errors import InputError
from offload_lab.seats.simulation import SimulationConfig, _alternating, simulate

BASE = dict(developers=40, days=80, q=0.1, window_hours=2.0, turn_seconds=10.0, step_seconds=2.0)


def _agrees(result, demand, streams, n, sigmas=4.0):
    sim, se = result.overflow_probability(streams), result.overflow_standard_error(streams)
    closed = demand.sf(streams, n)
    assert abs(sim - closed) <= sigmas * se + 2e-4, (sim, closed, se)


def test_stationary_chain_is_on_a_fraction_p_of_the_time():
    rng = np.random.default_rng(3)
    for p, mean_on in ((0.071, 5.0), (0.5, 3.0), (0.9, 1.0)):
        x = _alternating(rng, 400, 900, p, mean_on)
        assert x.shape == (400, 900)
        assert x.mean() == pytest.approx(p, abs=0.01)
        assert x[:, 0].mean() == pytest.approx(p, abs=0.06)  # stationary from the first step, not warming up


def test_same_seed_same_result_other_seed_other_result():
    short = {**BASE, "days": 5}
    a, b = simulate(SimulationConfig(**short, seed=1)), simulate(SimulationConfig(**short, seed=1))
    c = simulate(SimulationConfig(**short, seed=2))
    assert np.array_equal(a.day_seconds_at_count, b.day_seconds_at_count)
    assert not np.array_equal(a.day_seconds_at_count, c.day_seconds_at_count)


def test_independent_developers_give_the_binomial():
    r = simulate(SimulationConfig(**BASE, seed=11, watch_streams=(7,)))
    n, q = BASE["developers"], BASE["q"]
    assert r.seconds == pytest.approx(BASE["days"] * BASE["window_hours"] * 3600)
    assert r.mean_generating() == pytest.approx(n * q, rel=0.02)
    for s in (4, 7, 9):
        _agrees(r, Demand(q), s, n)
    # the whole distribution, not only one tail
    tv = 0.5 * np.abs(r.distribution() - stats.binom.pmf(np.arange(n + 1), n, q)).sum()
    assert tv < 0.02
    assert r.mean_overload_seconds(7) > 0


def test_sessions_bunch_turns_but_keep_the_binomial_at_each_moment():
    r = simulate(SimulationConfig(**BASE, sessions_per_day=1.0, session_hours=0.5, seed=12))
    assert r.mean_generating() == pytest.approx(BASE["developers"] * BASE["q"], rel=0.03)
    for s in (4, 7):
        _agrees(r, Demand(BASE["q"]), s, BASE["developers"])


def test_shared_days_give_the_beta_binomial():
    cfg = SimulationConfig(**{**BASE, "days": 400, "window_hours": 1.0}, rho=0.1, seed=13)
    r = simulate(cfg)
    for s in (4, 8, 12):
        _agrees(r, Demand(BASE["q"], 0.1), s, BASE["developers"])
    assert r.overflow_probability(8) > Demand(BASE["q"]).sf(8, BASE["developers"])


def test_shared_schedule_gives_the_binomial_mixture():
    shape = (0.5, 1.5, 1.0, 1.0)
    r = simulate(SimulationConfig(**BASE, shape=shape, seed=14))
    for s in (5, 8):
        _agrees(r, Demand(BASE["q"], shape=shape), s, BASE["developers"])


def test_overflow_counts_days_and_episodes():
    r = simulate(SimulationConfig(**{**BASE, "days": 10}, seed=15, watch_streams=(2, 30)))
    assert r.days_with_overflow(30) <= r.days_with_overflow(2) == 10
    assert r.mean_overload_seconds(2) >= BASE["step_seconds"]
    with pytest.raises(KeyError):
        r.mean_overload_seconds(5)


@pytest.mark.parametrize("change,match", [
    (dict(developers=0), "at least one developer"),
    (dict(window_hours=25), "at most 24 hours"),
    (dict(step_seconds=20), "must not exceed turn_seconds"),
    (dict(sessions_per_day=2.0), "both sessions_per_day and session_hours"),
    (dict(sessions_per_day=3.0, session_hours=1.0), "do not fit"),
    (dict(sessions_per_day=1.0, session_hours=0.1, q=0.2), "cannot be reached"),
    (dict(rho=1.0), "rho"),
    (dict(shape=(0.0, 0.0)), "positive sum"),
])
def test_bad_configs_rejected(change, match):
    with pytest.raises(InputError, match=match):
        SimulationConfig(**{**BASE, **change})
