"""A seeded simulation of a team's agent sessions over working days: how many generate at each moment.

Each developer, on each simulated day, alternates between being in a session and not, and within a session between
an agent turn being generated (a burst of mean ``turn_seconds``) and the person reading, typing or running tests.
Both alternations are two-state Markov chains on a grid of ``step_seconds``, started in their stationary state, so
that at every step a developer generates with probability exactly ``q`` when nothing else is set: the count of
generating developers is then Binomial(n, q) at each moment, as :mod:`offload_lab.seats.capacity` assumes, and the
simulation can be checked against it.

Beyond the closed form it adds, one at a time or together:

* ``rho``: each day the whole team's chance of generating is drawn from a Beta with mean ``q`` and intra-team
  correlation ``rho`` (shared deadlines, release days); with no schedule shape the count is then beta-binomial.
* ``shape``: a shared daily schedule, the window split into equal parts whose ``q`` differ in these proportions
  (everyone busy after stand-up, quiet at lunch); alone it gives a mixture of binomials over the parts.
* sessions: ``sessions_per_day`` sessions of ``session_hours`` each; they do not change the chance at a moment, but
  they bunch a developer's turns, which changes how long an overload lasts once it starts.

A day with ``p_d`` above what sessions can hold gives longer sessions first (up to the whole window) and then busier
ones; the product, the day's chance of generating, is kept exactly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from offload_lab.core import progress
from offload_lab.core.errors import InputError


@dataclass(frozen=True)
class SimulationConfig:
    developers: int
    days: int
    q: float
    window_hours: float
    turn_seconds: float
    rho: float = 0.0
    sessions_per_day: float | None = None
    session_hours: float | None = None
    shape: tuple[float, ...] | None = None
    step_seconds: float = 2.0
    seed: int = 0
    watch_streams: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise InputError(f"simulation: {msg}")

        if self.developers < 1 or self.days < 1:
            bad(f"needs at least one developer and one day (got {self.developers} and {self.days})")
        if not (0 < self.q <= 1):
            bad(f"q must be in (0, 1]; got {self.q}")
        if not (0 <= self.rho < 1):
            bad(f"rho must be in [0, 1); got {self.rho}")
        if not (0 < self.window_hours <= 24):
            bad(f"the daily window must be more than 0 and at most 24 hours; got {self.window_hours}")
        if not (self.turn_seconds > 0 and self.step_seconds > 0):
            bad("turn_seconds and step_seconds must be positive")
        if self.step_seconds > self.turn_seconds:
            bad(f"step_seconds ({self.step_seconds}) must not exceed turn_seconds ({self.turn_seconds}): a step "
                "longer than a turn cannot resolve it")
        if (self.sessions_per_day is None) != (self.session_hours is None):
            bad("give both sessions_per_day and session_hours, or neither")
        if self.sessions_per_day is not None:
            if not (self.sessions_per_day > 0 and self.session_hours and self.session_hours > 0):
                bad("sessions_per_day and session_hours must be positive")
            if self.session_fraction() > 1:
                bad(f"{self.sessions_per_day:g} sessions of {self.session_hours:g} h do not fit in a "
                    f"{self.window_hours:g} h window")
            if self.q / self.session_fraction() > 1:
                bad(f"q = {self.q} cannot be reached inside sessions that fill {self.session_fraction():.0%} of "
                    "the window; make sessions longer or more")
        if self.shape is not None:
            if not self.shape or min(self.shape) < 0 or sum(self.shape) <= 0:
                bad(f"shape needs non-negative weights with a positive sum; got {self.shape}")
            peak = max(self.shape) / (sum(self.shape) / len(self.shape))
            if self.q / self.session_fraction() * peak > 1:
                bad(f"q = {self.q} under shape {self.shape} exceeds 1 in its busiest part")

    @property
    def steps_per_day(self) -> int:
        return int(round(self.window_hours * 3600 / self.step_seconds))

    def session_fraction(self) -> float:
        if self.sessions_per_day is None or self.session_hours is None:
            return 1.0
        return self.sessions_per_day * self.session_hours / self.window_hours

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape) if self.shape else None
        d["watch_streams"] = list(self.watch_streams)
        return d


@dataclass
class SimulationResult:
    config: SimulationConfig
    day_p: np.ndarray  # (days,) the team's chance of generating that day
    day_seconds_at_count: np.ndarray  # (days, n + 1) seconds of the window with k developers generating
    episodes: dict[int, np.ndarray]  # watched streams -> (days,) number of overload episodes that day
    capped_days: int  # days whose draw had to lengthen sessions to keep p_d

    @property
    def seconds(self) -> float:
        return float(self.day_seconds_at_count.sum())

    def distribution(self) -> np.ndarray:
        """Share of the simulated window time with k = 0..n developers generating."""
        total = self.day_seconds_at_count.sum(axis=0)
        return total / total.sum()

    def _day_overflow(self, streams: int) -> np.ndarray:
        per_day = self.day_seconds_at_count
        return per_day[:, streams + 1 :].sum(axis=1) / per_day.sum(axis=1)

    def overflow_probability(self, streams: int) -> float:
        """Share of window time with more than ``streams`` generating: the simulation's P(X > streams)."""
        return float(self.distribution()[streams + 1 :].sum())

    def overflow_standard_error(self, streams: int) -> float:
        """Standard error of :meth:`overflow_probability` from the spread between days (days are independent)."""
        d = self._day_overflow(streams)
        return float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else float("nan")

    def days_with_overflow(self, streams: int) -> int:
        return int((self._day_overflow(streams) > 0).sum())

    def mean_overload_seconds(self, streams: int) -> float:
        """Mean length of an episode with more than ``streams`` generating (``streams`` must be watched)."""
        if streams not in self.episodes:
            raise KeyError(f"streams {streams} was not in watch_streams {self.config.watch_streams}")
        n = int(self.episodes[streams].sum())
        over = float(self.day_seconds_at_count[:, streams + 1 :].sum())
        return over / n if n else 0.0

    def mean_generating(self) -> float:
        k = np.arange(self.day_seconds_at_count.shape[1])
        return float((self.distribution() * k).sum())


def _alternating(rng: np.random.Generator, rows: int, steps: int, p: float, mean_on: float) -> np.ndarray:
    """(rows, steps) booleans of independent two-state chains, stationary fraction ``p`` of steps on.

    On and off spells are geometric (mean ``mean_on`` and ``mean_on (1 - p) / p`` steps), which makes the chain
    Markov; starting "on" with probability ``p`` puts it in its stationary state at step 0, so every step is on with
    probability exactly ``p``.
    """
    if p <= 0:
        return np.zeros((rows, steps), dtype=bool)
    if p >= 1:
        return np.ones((rows, steps), dtype=bool)
    on_mean = max(mean_on, 1.0)
    off_mean = on_mean * (1 - p) / p
    if off_mean < 1.0:  # spells are whole steps: lengthen the on spells instead, keeping p
        off_mean, on_mean = 1.0, p / (1 - p)
    cycles = steps / (on_mean + off_mean)
    k = int(cycles * 1.2 + 6 * math.sqrt(cycles) + 4)
    start_on = rng.random(rows) < p
    while True:
        on = rng.geometric(1.0 / on_mean, size=(rows, k))
        off = rng.geometric(1.0 / off_mean, size=(rows, k))
        durations = np.empty((rows, 2 * k), dtype=np.int64)
        first = np.where(start_on[:, None], on, off)
        second = np.where(start_on[:, None], off, on)
        durations[:, 0::2], durations[:, 1::2] = first, second
        ends = np.cumsum(durations, axis=1)
        if (ends[:, -1] >= steps).all():
            break
        k *= 2  # rare: redraw with more spells (the draw is thrown away, so the result stays exactly Markov)
    states = np.empty((rows, 2 * k), dtype=bool)
    states[:, 0::2], states[:, 1::2] = start_on[:, None], ~start_on[:, None]
    clipped = np.minimum(ends, steps)
    lengths = np.diff(clipped, axis=1, prepend=0)
    return np.repeat(states.ravel(), lengths.ravel()).reshape(rows, steps)


def _day_chances(cfg: SimulationConfig, rng: np.random.Generator) -> np.ndarray:
    if cfg.rho == 0:
        return np.full(cfg.days, cfg.q)
    k = (1 - cfg.rho) / cfg.rho
    return rng.beta(cfg.q * k, (1 - cfg.q) * k, size=cfg.days)


def simulate(cfg: SimulationConfig) -> SimulationResult:
    """Run the simulation day by day; the same config (seed included) gives the same result."""
    rng = np.random.default_rng(cfg.seed)
    n, steps = cfg.developers, cfg.steps_per_day
    day_p = _day_chances(cfg, rng)
    f_base = cfg.session_fraction()
    shape = np.asarray(cfg.shape if cfg.shape else (1.0,), dtype=float)
    shape = shape / shape.mean()
    bounds = np.linspace(0, steps, shape.size + 1).round().astype(int)
    turn_steps = cfg.turn_seconds / cfg.step_seconds
    session_steps = (cfg.session_hours or 0) * 3600 / cfg.step_seconds
    hist = np.zeros((cfg.days, n + 1), dtype=np.int64)
    episodes = {s: np.zeros(cfg.days, dtype=np.int64) for s in cfg.watch_streams}
    capped = 0
    simulated = progress.counting(f"simulation of {n} developers", cfg.days, "days")
    for d in range(cfg.days):
        p_d = float(day_p[d])
        # Keep the day's chance p_d = (share of the window in session) x (chance of a turn in session).
        if cfg.sessions_per_day is None:
            f_d = 1.0  # no sessions: the whole window is one, and p_d is the chance of a turn in it
        else:
            f_d = min(1.0, f_base * p_d / cfg.q)
            capped += int(f_d < f_base * p_d / cfg.q)
        p_in = p_d / f_d if f_d > 0 else 0.0
        if f_d >= 1.0:
            in_session = np.ones((n, steps), dtype=bool)
        else:
            in_session = _alternating(rng, n, steps, f_d, session_steps)
        turns = np.empty((n, steps), dtype=bool)
        for part, w in enumerate(shape):
            a, b = bounds[part], bounds[part + 1]
            turns[:, a:b] = _alternating(rng, n, b - a, min(1.0, p_in * w), turn_steps)
        count = (in_session & turns).sum(axis=0)
        hist[d] = np.bincount(count, minlength=n + 1)
        for s in cfg.watch_streams:
            over = count > s
            episodes[s][d] = int(over[0]) + int(np.count_nonzero(over[1:] & ~over[:-1]))
        simulated.add()
    return SimulationResult(
        config=cfg,
        day_p=day_p,
        day_seconds_at_count=hist.astype(float) * cfg.step_seconds,
        episodes=episodes,
        capped_days=capped,
    )
