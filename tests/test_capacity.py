"""Seats and pods: binomial tails held to exact arithmetic and scipy, searches on cases checked by hand, the
beta-binomial's parametrization, and the mixture for a shared schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from offload_lab.seats import capacity
from offload_lab.seats.capacity import Demand
from offload_lab.core.errors import InputError


@pytest.mark.parametrize("n,q,s", [(1, 0.3, 0), (5, 0.5, 2), (19, 0.071, 4), (20, 0.071, 4), (60, 0.2, 15),
                                   (250, 0.071, 28), (40, 0.9, 38)])
def test_binomial_tail_is_exact_and_matches_scipy(n, q, s):
    exact = capacity.exact_binomial_sf(s, n, q)
    assert Demand(q).sf(s, n) == pytest.approx(exact, rel=1e-12, abs=1e-300)
    assert stats.binom.sf(s, n, q) == pytest.approx(exact, rel=1e-12, abs=1e-300)


def test_tail_by_hand():
    # q = 1/2, s = 1: P(X_n > 1) = 1 - (n + 1) / 2^n
    d = Demand(0.5)
    for n in range(1, 12):
        assert d.sf(1, n) == pytest.approx(1 - (n + 1) / 2**n, abs=1e-15)
    assert d.sf(3, 3) == 0.0 and d.sf(5, 0) == 0.0


@pytest.mark.parametrize("streams,q,alpha,want", [
    (1, 0.5, 0.2, 1),    # n = 2 already gives 1/4
    (1, 0.5, 0.25, 2),   # n = 2: 1/4 ok; n = 3: 1/2 not
    (1, 0.5, 0.5, 3),    # n = 3: 1/2 ok; n = 4: 11/16 not
    (0, 0.1, 0.2, 2),    # 1 - 0.9^n: n = 2 gives 0.19, n = 3 gives 0.271
    (3, 1.0, 0.01, 3),   # everyone always generating: one seat per stream
])
def test_seats_for_streams_hand_checked(streams, q, alpha, want):
    assert capacity.seats_for_streams(streams, Demand(q), alpha) == want


def test_seats_is_the_boundary_of_the_rule():
    d = Demand(0.071)
    for alpha in (0.01, 0.05):
        for s in (1, 4, 8, 40):
            n = capacity.seats_for_streams(s, d, alpha)
            assert d.sf(s, n) <= alpha < d.sf(s, n + 1)


@pytest.mark.parametrize("n,q,alpha,want_streams", [
    (3, 0.5, 0.2, 2),    # P(X > 1) = 1/2, P(X > 2) = 1/8
    (10, 0.1, 0.05, 3),  # P(X > 2) = 0.0702, P(X > 3) = 0.0128
    (0, 0.3, 0.01, 0),
    (1, 0.005, 0.01, 0),  # one developer rarely generating: the rule needs no stream at all
])
def test_streams_for_team_hand_checked(n, q, alpha, want_streams):
    assert capacity.streams_for_team(n, Demand(q), alpha) == want_streams


def test_pods_for_team_hand_checked():
    d = Demand(0.1)
    assert capacity.pods_for_team(10, 2, d, 0.05) == 2  # 3 streams, 2 a pod
    assert capacity.pods_for_team(10, 3, d, 0.05) == 1
    assert capacity.pods_for_team(0, 4, d, 0.05) == 0
    # The rule asks for no stream, but a developer still needs a pod to send turns to.
    assert capacity.pods_for_team(1, 4, Demand(0.005), 0.01) == 1
    assert capacity.pods_partitioned(20, 19) == 2 and capacity.pods_partitioned(19, 19) == 1


def test_vectorized_pods_agree_with_breakpoints_and_scalar_search():
    for q, alpha, spp in ((0.071, 0.01, 4), (0.2, 0.05, 3), (0.02, 0.001, 8)):
        d = Demand(q)
        ns = np.arange(0, 600)
        pods = capacity.pods_for_teams(ns, spp, d, alpha)
        assert (np.diff(pods) >= 0).all()
        bp = capacity.pod_breakpoints(599, spp, d, alpha)
        top = np.array([t for _, t in bp])
        want = np.where(ns == 0, 0, np.searchsorted(top, ns) + 1)
        assert (pods == want).all()
        for n in (1, 17, 250, 599):
            s = capacity.streams_for_team(n, d, alpha)
            assert d.sf(s, n) <= alpha and (s == 0 or d.sf(s - 1, n) > alpha)


def test_beta_binomial_parametrization_gives_mean_q_and_correlation_rho():
    q, rho, n = 0.071, 0.05, 250
    d = Demand(q, rho)
    a, b = d.beta_params()
    assert stats.betabinom.mean(n, a, b) == pytest.approx(n * q)
    assert stats.betabinom.var(n, a, b) == pytest.approx(n * q * (1 - q) * (1 + (n - 1) * rho))


def test_correlation_lowers_seats_and_tiny_correlation_is_binomial():
    seats = [capacity.seats_for_streams(4, Demand(0.071, rho), 0.01) for rho in (0, 0.01, 0.05, 0.1, 0.3)]
    assert seats == sorted(seats, reverse=True) and seats[0] > seats[-1]
    independent = capacity.seats_for_streams(4, Demand(0.071), 0.01)
    assert capacity.seats_for_streams(4, Demand(0.071, 1e-9), 0.01) == independent
    assert Demand(0.071, 1e-9).sf(4, 30) == pytest.approx(Demand(0.071).sf(4, 30), rel=1e-4)


def test_schedule_shape_is_a_mixture_and_a_flat_one_is_the_binomial():
    flat = Demand(0.1, shape=(1.0, 1.0, 1.0))
    assert flat.sf(5, 40) == pytest.approx(Demand(0.1).sf(5, 40))
    peaked = Demand(0.1, shape=(0.5, 1.5))
    assert peaked.sf(5, 40) == pytest.approx((stats.binom.sf(5, 40, 0.05) + stats.binom.sf(5, 40, 0.15)) / 2)
    assert peaked.sf(8, 40) > flat.sf(8, 40)  # a shared peak fattens the tail


def test_seats_by_volume_and_streams_at_bar():
    # 10 tok/s for an hour = 36,000 tokens; a developer writing 360 tokens an hour: 100 developers, 50 at half.
    assert capacity.seats_by_volume(10, 360) == pytest.approx(100)
    assert capacity.seats_by_volume(10, 360, 0.5) == pytest.approx(50)
    assert capacity.streams_at_bar([1, 2, 3, 4, 6, 8], [186, 95, 70, 59, 40, 31], 40, 0.10) == 4
    assert capacity.streams_at_bar([1, 2, 3, 4, 6, 8], [186, 95, 70, 59, 40, 31], 40, 0.0) == 6
    assert capacity.streams_at_bar([1, 2], [30, 20], 40) == 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(q=0), "q must be in"), (dict(q=1.5), "q must be in"), (dict(q=0.1, rho=1.0), "rho"),
    (dict(q=0.1, rho=0.1, shape=(1, 2)), "not both"), (dict(q=0.6, shape=(0, 1)), "exceeds 1"),
])
def test_bad_demand_rejected(kwargs, match):
    with pytest.raises(InputError, match=match):
        Demand(**kwargs)


def test_bad_search_inputs_rejected():
    with pytest.raises(InputError, match="alpha"):
        capacity.seats_for_streams(4, Demand(0.1), 0)
    with pytest.raises(InputError, match="streams"):
        capacity.seats_for_streams(-1, Demand(0.1), 0.01)
    with pytest.raises(InputError, match="team"):
        capacity.pods_for_team(-3, 4, Demand(0.1), 0.01)
    with pytest.raises(InputError, match="too small"):
        capacity.seats_for_streams(4, Demand(1e-9), 0.5, n_max=1000)


def test_pods_for_ten_thousand_teams_is_one_vectorized_search():
    pods = capacity.pods_for_teams(range(1, 10_001), 4, Demand(0.071), 0.01)
    assert pods.shape == (10_000,) and pods[0] == 1
    assert pods[-1] == capacity.pods_for_team(10_000, 4, Demand(0.071), 0.01)
    assert pods[-1] < math.ceil(10_000 / capacity.seats_for_streams(4, Demand(0.071), 0.01))  # pooling pays
