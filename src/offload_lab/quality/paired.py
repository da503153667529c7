"""Paired statistics for two systems scored on the same items.

Notation (as in the study and the anchor): on ``n`` items, ``a`` both right, ``b`` only the reference right,
``c`` only the local side right, ``d`` both wrong. The difference is local minus reference, ``delta = (c - b) / n``;
the flip fraction is ``(b + c) / n``. Reported for every comparison:

- a paired bootstrap 95% interval over items (the headline; resampling items is resampling the four cell counts
  from a multinomial, which is exact and fast);
- Newcombe's hybrid score interval for a paired difference (1998, method 10), which does not collapse to a point
  when there are few flips;
- the exact McNemar p (a two-sided binomial test of ``b`` against ``b + c`` at one half) and ``b`` and ``c``;
- the flip fraction with its Wilson interval;
- the smallest resolvable difference: the 95% half-width of ``delta`` at the upper Wilson bound of the flip
  fraction, ``1.96 * sqrt(f_upper / n)``; a difference smaller than this is not resolved by this many items.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from scipy import stats

Z95 = float(stats.norm.ppf(0.975))
DEFAULT_RESAMPLES = 10_000


@dataclass(frozen=True)
class Table:
    """The 2x2 table of paired outcomes."""

    a: int
    b: int
    c: int
    d: int

    @property
    def n(self) -> int:
        return self.a + self.b + self.c + self.d

    @classmethod
    def from_counts(cls, n: int, b: int, c: int, a: int | None = None) -> "Table":
        """From ``n``, ``b`` and ``c``; the agreeing items split into ``a`` and ``d`` only matter for Newcombe's
        interval (when ``a`` is not given, all agreeing items count as both right)."""
        if min(n, b, c) < 0 or b + c > n:
            raise ValueError(f"need 0 <= b, c and b + c <= n; got n={n}, b={b}, c={c}")
        a = n - b - c if a is None else a
        if a < 0 or a + b + c > n:
            raise ValueError(f"a={a} does not fit n={n}, b={b}, c={c}")
        return cls(a, b, c, n - a - b - c)

    @classmethod
    def from_outcomes(cls, reference: Sequence[bool], local: Sequence[bool]) -> "Table":
        ref = np.asarray(reference, dtype=bool)
        loc = np.asarray(local, dtype=bool)
        if ref.shape != loc.shape:
            raise ValueError("reference and local outcomes must be paired item by item")
        return cls(int(np.sum(ref & loc)), int(np.sum(ref & ~loc)), int(np.sum(~ref & loc)), int(np.sum(~ref & ~loc)))


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p: binomial test of b successes in b + c trials at one half."""
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)


def newcombe(t: Table, confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe (1998) method 10 for ``p_local - p_reference`` on paired binary outcomes."""
    n = t.n
    if n == 0:
        return (math.nan, math.nan)
    p_loc, p_ref = (t.a + t.c) / n, (t.a + t.b) / n
    l1, u1 = wilson(t.a + t.c, n, confidence)
    l2, u2 = wilson(t.a + t.b, n, confidence)
    # The correlation of the two outcomes; zero when a margin is empty (Newcombe's convention).
    denom = (t.a + t.b) * (t.c + t.d) * (t.a + t.c) * (t.b + t.d)
    phi = 0.0 if denom == 0 else (t.a * t.d - t.b * t.c) / math.sqrt(denom)
    delta = p_loc - p_ref
    lower = delta - math.sqrt(max((p_loc - l1) ** 2 - 2 * phi * (p_loc - l1) * (u2 - p_ref) + (u2 - p_ref) ** 2, 0))
    upper = delta + math.sqrt(max((u1 - p_loc) ** 2 - 2 * phi * (u1 - p_loc) * (p_ref - l2) + (p_ref - l2) ** 2, 0))
    return (lower, upper)


def bootstrap(t: Table, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
              confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval of delta from resampling items with replacement (as cell counts: multinomial)."""
    if t.n == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    # delta depends only on the discordant cells: draw (b, c, agreeing) so the interval depends on n, b, c alone.
    cells = rng.multinomial(t.n, np.array([t.b, t.c, t.a + t.d]) / t.n, size=resamples)
    deltas = (cells[:, 1] - cells[:, 0]) / t.n
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(deltas, [alpha, 1 - alpha])
    return (float(lo), float(hi))


def resolvable_delta(t: Table, confidence: float = 0.95) -> float:
    """Half-width of a paired difference's interval at the upper Wilson bound of the flip fraction."""
    if t.n == 0:
        return math.nan
    _, f_upper = wilson(t.b + t.c, t.n, confidence)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    return z * math.sqrt(f_upper / t.n)


@dataclass(frozen=True)
class PairedResult:
    n: int
    a: int
    b: int
    c: int
    d: int
    reference_accuracy: float
    local_accuracy: float
    delta: float
    ci_low: float
    ci_high: float
    newcombe_low: float
    newcombe_high: float
    mcnemar_p: float
    flip_fraction: float
    flip_ci_low: float
    flip_ci_high: float
    se_paired: float
    se_unpaired: float
    resolvable_delta: float
    resamples: int
    seed: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def analyse(t: Table, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> PairedResult:
    n = t.n
    if n == 0:
        raise ValueError("no paired items to compare")
    p_ref, p_loc = (t.a + t.b) / n, (t.a + t.c) / n
    boot = bootstrap(t, resamples, seed)
    nc = newcombe(t)
    flip = wilson(t.b + t.c, n)
    se_paired = math.sqrt(max(t.b + t.c - (t.b - t.c) ** 2 / n, 0)) / n
    se_unpaired = math.sqrt(p_ref * (1 - p_ref) / n + p_loc * (1 - p_loc) / n)
    return PairedResult(
        n=n, a=t.a, b=t.b, c=t.c, d=t.d, reference_accuracy=p_ref, local_accuracy=p_loc,
        delta=(t.c - t.b) / n, ci_low=boot[0], ci_high=boot[1], newcombe_low=nc[0], newcombe_high=nc[1],
        mcnemar_p=mcnemar_exact(t.b, t.c), flip_fraction=(t.b + t.c) / n, flip_ci_low=flip[0],
        flip_ci_high=flip[1], se_paired=se_paired, se_unpaired=se_unpaired,
        resolvable_delta=resolvable_delta(t), resamples=resamples, seed=seed,
    )


def cluster_bootstrap(reference_followed: Sequence[int], local_followed: Sequence[int], totals: Sequence[int],
                      resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                      confidence: float = 0.95) -> dict[str, float]:
    """Instruction-level difference with prompts as clusters (IFEval: instructions of one prompt are not
    independent). Each argument holds one number per prompt: instructions followed, and instructions in all."""
    ref = np.asarray(reference_followed, dtype=float)
    loc = np.asarray(local_followed, dtype=float)
    tot = np.asarray(totals, dtype=float)
    if not (ref.shape == loc.shape == tot.shape) or tot.sum() == 0:
        raise ValueError("need one reference count, local count and total per prompt, with some instructions")
    delta = (loc.sum() - ref.sum()) / tot.sum()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(tot), size=(resamples, len(tot)))
    deltas = (loc[idx].sum(axis=1) - ref[idx].sum(axis=1)) / tot[idx].sum(axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(deltas, [alpha, 1 - alpha])
    return {"delta": float(delta), "ci_low": float(lo), "ci_high": float(hi), "instructions": int(tot.sum()),
            "prompts": int(len(tot)), "reference_accuracy": float(ref.sum() / tot.sum()),
            "local_accuracy": float(loc.sum() / tot.sum())}
