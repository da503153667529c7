"""The split of a published week and the prefill rate it was timed at, inferred from every published figure at once.

A profile that gives a total and a re-read ratio (``total = (1 + r)·O + N``) and publishes the hours generating
(``3600·H = O/v + N/P``) leaves three unknowns: the output ``O``, the new input ``N`` and the prefill rate ``P``
the hours were timed at, which the source names only as "the measured prefill rate". :func:`infer_split` in
:mod:`offload_lab.seats.profile` fixes ``P`` and solves for the split. Here ``P`` is left free: the published seats
by volume (a pod's output over a developer's, at full and at half utilization) fix ``O`` as well, so all three are
inferred together, each as the interval every published rounding allows:

* the total and the re-read ratio, to their printed rounding;
* the hours, the share of the period and q (each an interval on ``H``; :func:`published_hours_interval`);
* the pod's output rate and each published volume (whole developers, counted as this project counts them: rounded
  down), each an interval on ``O``.

Every constraint is named, and :func:`infer_jointly` says which ones bind (dropping one widens the inferred prefill
rate's range) and, for each named candidate rate (a prompt the source timed), whether it reproduces every figure
and, if not, the figures it misses and by how much.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Sequence

from offload_lab.core.errors import InputError
from offload_lab.seats.profile import (HOURS_PER_DAY, ProfileTiming, UsageProfile, rounding_interval,
                                     split_for_hours)

VolumeRule = Literal["floor", "round"]


@dataclass(frozen=True)
class Constraint:
    """One published figure read as an interval on the quantity it fixes."""

    name: str  # e.g. "q 7.1%"
    fixes: Literal["hours", "output"]
    low: float  # the interval it allows on H (hours) or O (output tokens) at the central pod rate
    high: float
    printed: str
    # Volume constraints: the utilization and the interval of developers the printed count allows.
    utilization: float | None = None
    developers: tuple[float, float] | None = None


@dataclass(frozen=True)
class RateCheck:
    """A candidate prefill rate (a prompt the source timed), inferred at alone, against every published figure."""

    name: str
    prefill_tok_s: float
    in_joint_range: bool
    output: float
    output_range: tuple[float, float]
    volumes: dict[str, dict[str, float]]  # constraint name -> published, recomputed (central, low, high), difference
    disagrees: list[str]  # the published figures this rate does not reproduce, in words


@dataclass(frozen=True)
class JointInference:
    output: float
    output_range: tuple[float, float]
    new_input: float
    new_input_range: tuple[float, float]
    prefill_tok_s: float
    prefill_tok_s_range: tuple[float, float]
    hours_range: tuple[float, float]
    constraints: list[Constraint]
    binding: list[str]  # constraints whose removal widens the prefill rate's range
    rate_checks: list[RateCheck] = field(default_factory=list)
    volume_rule: VolumeRule = "floor"

    def record(self) -> dict[str, Any]:
        return asdict(self)


def _utilization(u: float) -> str:
    return {1.0: "full utilization", 0.5: "half utilization"}.get(u, f"{u:.0%} utilization")


def count_interval(printed: str, rule: VolumeRule) -> tuple[float, float]:
    """The real values a printed whole count stands for: [n, n+1) rounded down, [n-0.5, n+0.5) rounded."""
    n = float(printed.replace(",", ""))
    return (n, n + 1.0) if rule == "floor" else rounding_interval(printed)


def count_of(value: float, rule: VolumeRule) -> int:
    return math.floor(value + 1e-9) if rule == "floor" else round(value)


def _output_interval(pod_tok_s: float, utilization: float, developers: tuple[float, float], period_h: float
                     ) -> tuple[float, float]:
    # seats = pod tok/s x 3600 x utilization / (O / period hours)  =>  O = pod x 3600 x u x period / seats
    k = pod_tok_s * 3600.0 * utilization * period_h
    return k / developers[1], k / developers[0]


def _hours_constraints(profile: UsageProfile) -> list[Constraint]:
    pub = profile.published
    if pub is None:
        raise InputError(f"profile {profile.name} publishes no hours, share or q to infer its split from")
    period_h, window_h = profile.period_days * HOURS_PER_DAY, profile.window_hours_in_period
    out = []
    for name, label, per in (("hours_generating", "the hours", 1.0), ("fraction_of_period", "the share of the period",
                                                                      period_h), ("q", "q", window_h)):
        printed = pub.printed(name)
        if printed is not None:
            lo, hi = rounding_interval(printed)
            out.append(Constraint(f"{label} ({printed})", "hours", lo * per, hi * per, printed))
    return out


def _rate_range(total: tuple[float, float], reread: tuple[float, float], pod: tuple[float, float],
                hours: Sequence[Constraint], volumes: Sequence[Constraint], v: float, period_h: float,
                steps: int = 9) -> tuple[float, float, tuple[float, float], tuple[float, float]] | None:
    """(rate low, rate high, output range, new-input range) over every value the constraints allow; None if none."""
    h_lo = max(c.low for c in hours) if hours else 0.0
    h_hi = min(c.high for c in hours) if hours else math.inf
    if h_lo >= h_hi:
        return None
    grid = lambda lo, hi: [lo + (hi - lo) * i / (steps - 1) for i in range(steps)]  # noqa: E731
    rates, outs, news = [], [], []
    h_grid = grid(h_lo, h_hi) if math.isfinite(h_hi) else [h_lo]
    for t, r, p, h in itertools.product(grid(*total), grid(*reread), grid(*pod), h_grid):
        o_lo, o_hi = 0.0, t / (1.0 + r)
        for c in volumes:
            assert c.utilization is not None and c.developers is not None
            a, b = _output_interval(p, c.utilization, c.developers, period_h)
            o_lo, o_hi = max(o_lo, a), min(o_hi, b)
        o_hi = min(o_hi, 3600.0 * h * v)  # the output alone cannot take longer than the hours
        if o_lo >= o_hi:
            continue
        for o in grid(o_lo, o_hi):
            n, d = t - (1.0 + r) * o, 3600.0 * h - o / v
            if n <= 0 or d <= 0:
                continue
            rates.append(n / d)
            outs.append(o)
            news.append(n)
    if not rates:
        return None
    return min(rates), max(rates), (min(outs), max(outs)), (min(news), max(news))


def infer_jointly(profile: UsageProfile, stream_tok_s: float, pod_output_tok_s: str,
                  volumes: Sequence[tuple[str, float]], candidate_rates: Sequence[tuple[str, float]] = (),
                  rule: VolumeRule = "floor") -> JointInference:
    """The week's output, new input and the prefill rate, from every published figure at once.

    ``pod_output_tok_s``: the pod's output rate as printed ("168"); ``volumes``: each published seats-by-volume count
    as printed with its utilization ((\"262\", 1.0), (\"131\", 0.5)); ``candidate_rates``: named prefill rates the
    source measured, each checked on its own against every figure. ``stream_tok_s`` is the rate the source timed
    output at, exact (it states it).
    """
    tokens = profile.tokens
    if tokens.total is None or tokens.cached_reads_per_output_token is None:
        raise InputError(f"profile {profile.name} gives its split; there is nothing to infer")
    if not volumes:
        raise InputError("the joint inference needs at least one published seats-by-volume figure")
    period_h = profile.period_days * HOURS_PER_DAY
    total = rounding_interval(f"{tokens.total / 1e6:g}")
    total = (total[0] * 1e6, total[1] * 1e6)
    reread = rounding_interval(f"{tokens.cached_reads_per_output_token:g}")
    pod = rounding_interval(pod_output_tok_s)
    pod_c = float(pod_output_tok_s.replace(",", ""))
    hours = _hours_constraints(profile)
    vols = []
    for printed, u in volumes:
        dev = count_interval(printed, rule)
        lo, hi = _output_interval(pod_c, u, dev, period_h)
        vols.append(Constraint(f"{printed} developers by volume at {_utilization(u)}", "output", lo, hi, printed,
                               utilization=u, developers=dev))
    found = _rate_range(total, reread, pod, hours, vols, stream_tok_s, period_h)
    if found is None:
        raise InputError("no output, new input and prefill rate reproduce every published figure at once: "
                         + "; ".join(f"{c.name} allows {c.low:,.0f} to {c.high:,.0f}" for c in hours + vols))
    r_lo, r_hi, o_rng, n_rng = found
    # Central values: the hours where q puts them (clipped to what all allow).
    h_lo, h_hi = max(c.low for c in hours), min(c.high for c in hours)
    pub = profile.published
    assert pub is not None
    h_c = pub.q * profile.window_hours_in_period if pub.q is not None else (h_lo + h_hi) / 2
    h_c = min(max(h_c, h_lo), h_hi)
    # The output: the middle of what every volume allows at the printed pod rate.
    o_lo, o_hi = max(c.low for c in vols), min(c.high for c in vols)
    if o_lo >= o_hi:
        raise InputError("the published volumes disagree with each other at the printed pod rate: "
                         + "; ".join(f"{c.name} allows {c.low:,.0f} to {c.high:,.0f} output tokens" for c in vols))
    o_c = (o_lo + o_hi) / 2
    n_c = tokens.total - (1.0 + tokens.cached_reads_per_output_token) * o_c
    p_c = n_c / (3600.0 * h_c - o_c / stream_tok_s)
    binding = []
    for c in hours + vols:
        others_h = [x for x in hours if x is not c]
        others_v = [x for x in vols if x is not c]
        wider = _rate_range(total, reread, pod, others_h, others_v, stream_tok_s, period_h) if others_v else None
        if wider is None or wider[0] < r_lo * (1 - 1e-6) or wider[1] > r_hi * (1 + 1e-6):
            binding.append(c.name)
    checks = [_check_rate(profile, name, rate, stream_tok_s, pod, pod_c, vols, (h_lo, h_hi), h_c, (total, reread),
                          (r_lo, r_hi), rule) for name, rate in candidate_rates]
    return JointInference(output=o_c, output_range=o_rng, new_input=n_c, new_input_range=n_rng, prefill_tok_s=p_c,
                          prefill_tok_s_range=(r_lo, r_hi), hours_range=(h_lo, h_hi), constraints=hours + vols,
                          binding=binding, rate_checks=checks, volume_rule=rule)


def _check_rate(profile: UsageProfile, name: str, rate: float, v: float, pod: tuple[float, float], pod_c: float,
                vols: Sequence[Constraint], hours: tuple[float, float], h_c: float,
                inputs: tuple[tuple[float, float], tuple[float, float]], joint: tuple[float, float],
                rule: VolumeRule, steps: int = 9) -> RateCheck:
    """The split at ``rate`` alone (from the hours, not the volumes) and the volumes it then gives: central at the
    printed total, ratio, pod rate and q; the range over every value their roundings and the hours' allow."""
    tokens = profile.tokens
    assert tokens.total is not None and tokens.cached_reads_per_output_token is not None
    period_h = profile.period_days * HOURS_PER_DAY
    o_c = split_for_hours(tokens.total, tokens.cached_reads_per_output_token, v, rate, h_c)[0]
    grid = lambda lo, hi: [lo + (hi - lo) * i / (steps - 1) for i in range(steps)]  # noqa: E731
    outs = []
    for t, r, h in itertools.product(grid(*inputs[0]), grid(*inputs[1]), grid(*hours)):
        try:
            outs.append(split_for_hours(t, r, v, rate, h)[0])
        except InputError:  # no split at this corner: the rate cannot give these hours
            continue
    if not outs:
        raise InputError(f"the {name} rate, {rate:,.0f} tokens/s, gives no split of the week for any value the "
                         "published hours allow")
    o_rng = (min(outs), max(outs))
    volumes, disagrees = {}, []
    for c in vols:
        u = c.utilization or 1.0
        seats = lambda p, o: p * 3600.0 * u * period_h / o  # noqa: E731
        got = count_of(seats(pod_c, o_c), rule)
        lo, hi = count_of(seats(pod[0], o_rng[1]), rule), count_of(seats(pod[1], o_rng[0]), rule)
        published = float(c.printed.replace(",", ""))
        volumes[c.name] = {"published": published, "recomputed": got, "low": lo, "high": hi,
                           "difference": got - published}
        if not lo <= published <= hi:
            disagrees.append(f"{c.printed} by volume at {_utilization(u)} (this rate gives {got}, {lo} to {hi}: "
                             f"{got - published:+.0f})")
    return RateCheck(name=name, prefill_tok_s=rate, in_joint_range=joint[0] <= rate <= joint[1], output=o_c,
                     output_range=o_rng, volumes=volumes, disagrees=disagrees)


def joint_timing(profile: UsageProfile, j: JointInference, stream_tok_s: float) -> ProfileTiming:
    """The profile timed with the jointly inferred split and prefill rate (what the seat analysis reads)."""
    r = profile.tokens.cached_reads_per_output_token or 0.0
    hours = (j.output / stream_tok_s + j.new_input / j.prefill_tok_s) / 3600.0
    window = profile.window_hours_in_period
    return ProfileTiming(
        profile=profile.name, stream_tok_s=stream_tok_s, prefill_tok_s=j.prefill_tok_s, output_tokens=j.output,
        new_input_tokens=j.new_input, cached_read_tokens=r * j.output, split="inferred",
        output_tokens_range=j.output_range, new_input_tokens_range=j.new_input_range, hours_generating=hours,
        hours_generating_range=j.hours_range, fraction_of_period=hours / (profile.period_days * HOURS_PER_DAY),
        window_hours_in_period=window, q=hours / window, q_range=(j.hours_range[0] / window,
                                                                   j.hours_range[1] / window),
        split_basis=(f"inferred, not published, with the prefill rate, from every published figure at once: total = "
                     f"(1 + {r:g}) × output + new input; hours {j.hours_range[0]:.3f} to {j.hours_range[1]:.3f} h; "
                     + "; ".join(c.name for c in j.constraints if c.fixes == "output")),
        split_prefill_tok_s=j.prefill_tok_s)
