"""Paired statistics on outcome tables with known answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from offload_lab.cli import main as cli
from offload_lab.quality import paired


def test_anchor_example_every_statistic():
    # n=150, a=120, b=10, c=4 (the worked example in the quality anchor).
    r = paired.analyse(paired.Table(120, 10, 4, 16))
    assert r.n == 150 and (r.b, r.c) == (10, 4)
    assert r.delta == pytest.approx(-0.040)
    assert (round(r.newcombe_low, 3), round(r.newcombe_high, 3)) == (-0.092, 0.010)
    assert (round(r.ci_low, 3), round(r.ci_high, 3)) == (-0.087, 0.007)
    assert round(r.mcnemar_p, 3) == 0.180
    assert round(r.flip_fraction, 3) == 0.093
    assert (round(r.flip_ci_low, 3), round(r.flip_ci_high, 3)) == (0.056, 0.151)
    assert round(r.se_paired, 4) == 0.0247
    assert r.se_unpaired > 1.6 * r.se_paired  # pairing is what makes n=150 informative


def test_published_humaneval_counts_reproduce_the_published_interval():
    # The study: HumanEval 164 items, difference -0.018, interval [-0.049, +0.012], 4.3% of items flipped.
    r = paired.analyse(paired.Table.from_counts(164, b=5, c=2))
    assert round(r.delta, 3) == -0.018
    assert (round(r.ci_low, 3), round(r.ci_high, 3)) == (-0.049, 0.012)
    assert round(100 * r.flip_fraction, 1) == 4.3


def test_published_ifeval_counts_give_the_published_difference_and_flips():
    r = paired.analyse(paired.Table.from_counts(150, b=2, c=4))
    assert round(r.delta, 3) == 0.013 and round(100 * r.flip_fraction, 1) == 4.0
    assert round(r.ci_high, 3) == 0.047
    assert r.ci_low < 0 < r.ci_high and r.mcnemar_p > 0.05


def test_identical_outcomes_give_a_zero_difference_but_a_nonzero_newcombe_interval():
    # GSM8K in the study: 0.960 against 0.960, the same outcome on every item.
    r = paired.analyse(paired.Table(144, 0, 0, 6))
    assert r.delta == 0 and r.ci_low == 0 and r.ci_high == 0
    assert r.mcnemar_p == 1.0 and r.flip_fraction == 0
    assert r.newcombe_low < 0 < r.newcombe_high
    z2 = stats.norm.ppf(0.975) ** 2
    assert r.flip_ci_high == pytest.approx(z2 / (150 + z2))  # Wilson upper bound at zero successes
    assert r.resolvable_delta == pytest.approx(1.959964 * math.sqrt(r.flip_ci_high / 150), rel=1e-6)


def test_one_sided_flips_are_significant_and_symmetric():
    up = paired.analyse(paired.Table.from_counts(20, b=0, c=10))
    down = paired.analyse(paired.Table.from_counts(20, b=10, c=0))
    assert up.delta == 0.5 and down.delta == -0.5
    assert up.mcnemar_p == pytest.approx(2 * 0.5 ** 10) == down.mcnemar_p
    assert up.ci_low > 0 and down.ci_high < 0
    assert up.newcombe_low == pytest.approx(-down.newcombe_high)
    assert up.newcombe_high == pytest.approx(-down.newcombe_low)


def test_mcnemar_is_the_exact_binomial_test():
    for b, c in [(0, 0), (1, 0), (3, 9), (12, 5), (40, 41)]:
        want = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5).pvalue
        assert paired.mcnemar_exact(b, c) == pytest.approx(want)


def test_newcombe_contains_the_difference_and_stays_in_range():
    rng = np.random.default_rng(1)
    for _ in range(200):
        cells = rng.multinomial(int(rng.integers(1, 200)), rng.dirichlet(np.ones(4)))
        t = paired.Table(*map(int, cells))
        lo, hi = paired.newcombe(t)
        d = (t.c - t.b) / t.n
        assert -1 - 1e-9 <= lo <= d + 1e-12 and d - 1e-12 <= hi <= 1 + 1e-9


def test_bootstrap_depends_on_n_b_c_only_and_is_reproducible():
    a = paired.bootstrap(paired.Table(120, 10, 4, 16), seed=3)
    b = paired.bootstrap(paired.Table(100, 10, 4, 36), seed=3)
    assert a == b == paired.bootstrap(paired.Table(120, 10, 4, 16), seed=3)


def test_bootstrap_over_cells_matches_resampling_items():
    ref = np.array([1] * 120 + [1] * 10 + [0] * 4 + [0] * 16, dtype=bool)
    loc = np.array([1] * 120 + [0] * 10 + [1] * 4 + [0] * 16, dtype=bool)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, 150, size=(20000, 150))
    deltas = (loc[idx].astype(int) - ref[idx].astype(int)).mean(axis=1)
    lo, hi = np.quantile(deltas, [0.025, 0.975])
    got = paired.bootstrap(paired.Table.from_outcomes(ref, loc), resamples=20000)
    assert got[0] == pytest.approx(lo, abs=0.007) and got[1] == pytest.approx(hi, abs=0.007)


def test_table_from_outcomes_counts_cells():
    t = paired.Table.from_outcomes([1, 1, 0, 0, 1], [1, 0, 1, 0, 1])
    assert (t.a, t.b, t.c, t.d) == (2, 1, 1, 1)
    with pytest.raises(ValueError):
        paired.Table.from_outcomes([1, 0], [1])
    with pytest.raises(ValueError):
        paired.Table.from_counts(5, 4, 4)


def test_cluster_bootstrap_of_instruction_level():
    # Three prompts with 2, 1, 3 instructions; local follows one more instruction than the reference overall.
    r = paired.cluster_bootstrap([1, 1, 2], [2, 1, 2], [2, 1, 3], resamples=2000)
    assert r["delta"] == pytest.approx(1 / 6) and r["instructions"] == 6 and r["prompts"] == 3
    assert r["ci_low"] <= r["delta"] <= r["ci_high"]
    same = paired.cluster_bootstrap([1, 0], [1, 0], [1, 1])
    assert same["delta"] == same["ci_low"] == same["ci_high"] == 0


def test_cli_paired_json_has_the_documented_keys(capsys):
    assert cli.main(["quality", "paired", "--n", "164", "--b", "5", "--c", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"delta", "ci_low", "ci_high", "mcnemar_p", "flip_fraction"} <= set(out)
    assert round(out["delta"], 3) == -0.018 and round(out["ci_low"], 3) == -0.049


def test_cli_paired_rejects_impossible_counts(capsys):
    assert cli.main(["quality", "paired", "--n", "5", "--b", "4", "--c", "4"]) == 2
    assert "is more than --n 5" in capsys.readouterr().err
