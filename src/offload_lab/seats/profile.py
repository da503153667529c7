"""Usage profiles: how much one developer's coding agent generates, and so how often it needs a stream.

A profile (``configs/profiles/*.yaml``) states a developer's tokens over a period, split into output tokens (what the
model writes, at the per-stream decode rate), new input tokens (prefilled once, at the prefill rate) and cached reads
(context the server reads again from its prefix cache; taken here as free, since a cache hit skips the prefill). It
also states the sessions, the active days and the daily window the developer works in.

From a profile, a per-stream output rate and a prefill rate follow the hours spent generating, their fraction of the
period, and ``q``: the chance that the developer is generating at a given moment of the window. ``q`` is what the
seat models in :mod:`offload_lab.seats.capacity` take.

A profile may give the split outright (``output``, ``new_input``, ``cached_read``) or, as the published one does, a
total and the number of context tokens re-read for every *output* token (``cached_reads_per_output_token``). Then the
split into output and new input is not known: the total is ``(1 + r)·O + N``. It is *inferred* (:func:`infer_split`)
from the hours generating that the source published, which fix ``O/v + N/P``: two equations, two unknowns. The hours
are known only to their rounding (hours, share of the period and q each give an interval; their intersection is
used), so the inferred split is a central value and a range, labelled ``inferred`` in :class:`ProfileTiming`, and
every figure built on it carries the range. By construction the inferred split reproduces the published hours and q;
what it adds is the output tokens (for volume) and the new input tokens, which the source does not publish.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from offload_lab.core.errors import InputError
from offload_lab.core.places import kind_of

HOURS_PER_DAY = 24.0


class Provenance(BaseModel):
    """Where a profile's figures come from; a profile without a source is an assumption and says so."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["published", "measured", "assumed"]
    source: str = Field(description="file, URL or person the figures come from")
    section: str | None = Field(None, description="section of the source")
    source_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$",
                                      description="sha256 of the source file when it was transcribed (64 hex digits)")
    note: str = ""


class TokenCounts(BaseModel):
    """A developer's tokens over the profile's period. Give the split, or a total and the re-read ratio."""

    # `.inf` is valid YAML and a valid float: refused here, naming the field, not printed as "inf hours generating".
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    total: float | None = Field(None, ge=0, description="all tokens the provider counted in the period")
    output: float | None = Field(None, ge=0, description="tokens the model generated")
    new_input: float | None = Field(None, ge=0, description="input tokens prefilled for the first time")
    cached_read: float | None = Field(None, ge=0, description="context tokens read again from the prefix cache")
    cached_reads_per_output_token: float | None = Field(
        None, ge=0, description="context tokens re-read for every output token the model wrote"
    )

    @model_validator(mode="before")
    @classmethod
    def _old_name(cls, data: Any) -> Any:
        # The field's old name carried the old reading (re-reads per token written, output and new input together).
        if isinstance(data, dict) and "cached_reads_per_written_token" in data:
            raise ValueError("cached_reads_per_written_token is now cached_reads_per_output_token: the ratio is "
                             "context re-read for every OUTPUT token; rename it, and check that this is what your "
                             "source's figure means")
        return data

    @model_validator(mode="after")
    def _enough_to_split(self) -> "TokenCounts":
        parts = (self.output, self.new_input, self.cached_read)
        if self.output is not None and self.new_input is not None and self.cached_read is not None:
            split = self.output + self.new_input + self.cached_read
            if self.total is not None and abs(split - self.total) > 1e-6 * max(self.total, 1.0):
                raise ValueError(
                    f"output + new_input + cached_read = {split:,.0f} does not equal total = {self.total:,.0f}; "
                    "give consistent counts or leave total out"
                )
            return self
        if self.total is not None and self.cached_reads_per_output_token is not None:
            if any(p is not None for p in parts):
                raise ValueError(
                    "give either output, new_input and cached_read, or total and cached_reads_per_output_token, "
                    "not a mix"
                )
            return self
        raise ValueError(
            "tokens need either output, new_input and cached_read, or total and cached_reads_per_output_token"
        )

    @property
    def split_given(self) -> bool:
        return self.output is not None and self.new_input is not None and self.cached_read is not None


class PublishedFigures(BaseModel):
    """Figures the source derived from the profile; kept to compare with what this project computes, never used."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    hours_generating: float | None = Field(None, ge=0)
    fraction_of_period: float | None = Field(None, ge=0, le=1)
    q: float | None = Field(None, ge=0, le=1)
    stream_tok_s: float | None = Field(None, gt=0, description="the output rate the source timed tokens at")
    as_published: dict[str, str] = Field(
        default_factory=dict,
        description="figures as printed ('2.8', '1.7%', '7.1%'), by field name: they give each figure's rounding")

    def printed(self, name: str) -> str | None:
        """The figure as printed: from ``as_published``, else the shortest spelling of the number (its rounding)."""
        if name in self.as_published:
            return self.as_published[name]
        v = getattr(self, name)
        if v is None:
            return None
        return f"{100 * v:.10g}%" if name in ("fraction_of_period", "q") else f"{v:.10g}"


class UsageProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str
    description: str = ""
    provenance: Provenance
    period_days: float = Field(gt=0, description="length of the period the tokens were counted over, in days")
    active_days: float = Field(gt=0, description="days of the period the developer worked")
    sessions: int = Field(ge=0, strict=True, description="agent sessions in the period (a whole number; true is not 1)")
    window_hours: float = Field(gt=0, description="hours of the working window on each active day")
    tokens: TokenCounts
    published: PublishedFigures | None = None

    @model_validator(mode="after")
    def _fits_in_time(self) -> "UsageProfile":
        if self.window_hours > HOURS_PER_DAY:
            raise ValueError(f"window_hours is {self.window_hours:g}: a daily window cannot be longer than a day (24)")
        if self.active_days > self.period_days:
            raise ValueError(
                f"active_days ({self.active_days:g}) is more than the period has days (period_days "
                f"{self.period_days:g})"
            )
        return self

    @property
    def window_hours_in_period(self) -> float:
        return self.active_days * self.window_hours

    @property
    def sessions_per_active_day(self) -> float:
        return self.sessions / self.active_days


@dataclass(frozen=True)
class TokenSplit:
    output: float
    new_input: float
    cached_read: float
    kind: Literal["published", "inferred"]
    # The range the published roundings allow (equal to the value for a published split).
    output_range: tuple[float, float]
    new_input_range: tuple[float, float]
    hours_range: tuple[float, float] | None = None  # hours generating consistent with every published rounding
    basis: str = ""  # how an inferred split was inferred, in words

    @property
    def written(self) -> float:
        return self.output + self.new_input


@dataclass(frozen=True)
class ProfileTiming:
    """What a profile means for a server: time generating, its share of the period, and q."""

    profile: str
    stream_tok_s: float
    prefill_tok_s: float | None
    output_tokens: float
    new_input_tokens: float
    cached_read_tokens: float
    split: Literal["published", "inferred"]
    output_tokens_range: tuple[float, float]
    new_input_tokens_range: tuple[float, float]
    hours_generating: float
    hours_generating_range: tuple[float, float]
    fraction_of_period: float
    window_hours_in_period: float
    q: float
    q_range: tuple[float, float]
    split_basis: str = ""
    split_prefill_tok_s: float | None = None  # the prefill rate an inferred split was inferred at

    @property
    def split_known(self) -> bool:
        return self.split == "published"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["split_known"] = self.split_known
        return d


def rounding_interval(printed: str) -> tuple[float, float]:
    """The half-open interval of values that print as ``printed``: '2.8' → [2.75, 2.85); '7.1%' → [0.0705, 0.0715)."""
    text = printed.strip().replace(",", "")
    scale = Decimal("0.01") if text.endswith("%") else Decimal(1)
    try:
        d = Decimal(text.rstrip("%"))
    except InvalidOperation as e:
        raise InputError(f"{printed!r} is not a number as printed (e.g. '2.8' or '7.1%')") from e
    exponent = d.as_tuple().exponent
    half = Decimal(1).scaleb(exponent if isinstance(exponent, int) else 0) / 2
    return float((d - half) * scale), float((d + half) * scale)


def published_hours_interval(profile: UsageProfile) -> tuple[float, float]:
    """Hours generating consistent with every published figure's rounding: hours, share of the period, q."""
    pub = profile.published
    if pub is None:
        raise InputError(f"profile {profile.name} publishes no hours, share or q to infer its split from")
    period_h, window_h = profile.period_days * HOURS_PER_DAY, profile.window_hours_in_period
    found: list[tuple[float, float]] = []
    for name, per in (("hours_generating", 1.0), ("fraction_of_period", period_h), ("q", window_h)):
        printed = pub.printed(name)
        if printed is not None:
            lo, hi = rounding_interval(printed)
            found.append((lo * per, hi * per))
    if not found:
        raise InputError(f"profile {profile.name} publishes no hours, share or q to infer its split from")
    lo, hi = max(a for a, _ in found), min(b for _, b in found)
    if lo >= hi:
        raise InputError(f"profile {profile.name}: its published hours, share of the period and q do not agree "
                         f"(their rounding intervals {found} have no common value)")
    return lo, hi


def split_for_hours(total: float, reread_per_output: float, stream_tok_s: float, prefill_tok_s: float,
                    hours: float) -> tuple[float, float]:
    """(output, new input) with ``total = (1 + r)·O + N`` and ``3600·hours = O/v + N/P``."""
    r, v, p = reread_per_output, stream_tok_s, prefill_tok_s
    denom = (1 + r) / p - 1 / v
    if denom == 0:
        raise InputError(f"at a prefill rate of {p:g} tokens/s an output token and its share of the total take the "
                         "same time, so the hours do not determine the split: choose another prefill rate")
    out = (total / p - 3600 * hours) / denom
    new = total - (1 + r) * out
    if out <= 0 or new < 0:
        raise InputError(
            f"no split of {total:,.0f} tokens gives {hours:.4f} hours at {v:g} and {p:,.1f} tokens/s: the hours "
            f"must lie between {total / (1 + r) / v / 3600:.4f} (no new input) and {total / p / 3600:.4f} (no "
            "output); check the profile's figures and the prefill rate")
    return out, new


def infer_split(profile: UsageProfile, stream_tok_s: float, prefill_tok_s: float) -> TokenSplit:
    """The split of a total-and-ratio profile, inferred from its published hours (see the module's docstring).

    The central value uses the hours that the most precisely printed figure gives at its printed value (q times the
    window when q is published); the range comes from the ends of the hours interval every rounding allows.
    """
    tokens = profile.tokens
    assert tokens.total is not None and tokens.cached_reads_per_output_token is not None  # the validator saw to it
    lo, hi = published_hours_interval(profile)
    pub = profile.published
    assert pub is not None
    if pub.q is not None:
        central_h = pub.q * profile.window_hours_in_period
    elif pub.fraction_of_period is not None:
        central_h = pub.fraction_of_period * profile.period_days * HOURS_PER_DAY
    else:
        central_h = float(pub.hours_generating)  # type: ignore[arg-type]
    central_h = min(max(central_h, lo), hi)
    r = tokens.cached_reads_per_output_token
    out, new = split_for_hours(tokens.total, r, stream_tok_s, prefill_tok_s, central_h)
    ends = [split_for_hours(tokens.total, r, stream_tok_s, prefill_tok_s, h) for h in (lo, hi)]
    return TokenSplit(
        output=out, new_input=new, cached_read=r * out, kind="inferred",
        output_range=(min(e[0] for e in ends), max(e[0] for e in ends)),
        new_input_range=(min(e[1] for e in ends), max(e[1] for e in ends)),
        hours_range=(lo, hi),
        basis=(f"inferred, not published: total = (1 + {r:g}) × output + new input, and the published hours "
               f"({lo:.3f} to {hi:.3f} h by their rounding) = output / {stream_tok_s:g} tok/s + new input / "
               f"{prefill_tok_s:,.0f} tok/s"),
    )


def token_split(profile: UsageProfile, stream_tok_s: float | None = None,
                prefill_tok_s: float | None = None) -> TokenSplit:
    """The profile's split: as given, or inferred from its published hours (which needs both rates)."""
    t = profile.tokens
    if t.split_given:
        assert t.output is not None and t.new_input is not None and t.cached_read is not None
        return TokenSplit(t.output, t.new_input, t.cached_read, kind="published",
                          output_range=(t.output, t.output), new_input_range=(t.new_input, t.new_input))
    if stream_tok_s is None or prefill_tok_s is None:
        raise InputError(
            f"profile {profile.name} gives a total and a re-read ratio, not the split into output and new input: "
            "its split is inferred from its published hours, which needs an output rate and a prefill rate")
    return infer_split(profile, stream_tok_s, prefill_tok_s)


def _hours(split_out: float, split_new: float, stream_tok_s: float, prefill_tok_s: float | None) -> float:
    return (split_out / stream_tok_s + (split_new / prefill_tok_s if split_new else 0.0)) / 3600.0


def profile_timing(profile: UsageProfile, stream_tok_s: float, prefill_tok_s: float | None = None,
                   split_prefill_tok_s: float | None = None) -> ProfileTiming:
    """Hours generating = output / stream rate + new input / prefill rate; q = those hours / the window's hours.

    ``split_prefill_tok_s``: the prefill rate an inferred split is inferred at, when it is not the one the tokens are
    timed at. The split is a property of the developer's week, so it is inferred at the rate its source timed the
    published hours at (the study's own prefill); a campaign then times that week on its own pod's measured rate.

    Raises InputError when a rate is not positive, when the profile has new input tokens (given or to be inferred)
    and no prefill rate is given, or when the hours generating do not fit in the window (q above 1).
    """
    if not stream_tok_s > 0:
        raise InputError(f"the per-stream output rate must be positive tokens/s, not {stream_tok_s!r}")
    for what, rate in (("prefill rate", prefill_tok_s), ("prefill rate of the split", split_prefill_tok_s)):
        if rate is not None and not rate > 0:
            raise InputError(f"the {what} must be positive tokens/s, not {rate!r}")
    infer_at = split_prefill_tok_s if split_prefill_tok_s is not None else prefill_tok_s
    split = token_split(profile, stream_tok_s, infer_at)
    if split.new_input > 0 and prefill_tok_s is None:
        raise InputError(
            f"profile {profile.name} has {split.new_input:,.0f} new input tokens: give a prefill rate (tokens/s) to "
            "time them"
        )
    hours = _hours(split.output, split.new_input, stream_tok_s, prefill_tok_s)
    if not math.isfinite(hours):  # finite counts and rates whose quotient overflows (1e308 tokens at 1e-10 tok/s)
        raise InputError(
            f"profile {profile.name}: timing {split.output:.4g} output and {split.new_input:.4g} new input tokens "
            f"(tokens.output, tokens.new_input) at {stream_tok_s:.4g} and {prefill_tok_s or 0:.4g} tokens/s gives no "
            "finite number of hours; check those counts and the rates"
        )
    # The hours at the ends of the split's range (for an inferred split, the ends of the published interval).
    ends = [_hours(o, n, stream_tok_s, prefill_tok_s) for o, n in zip(split.output_range, split.new_input_range[::-1])]
    # An inferred split's hours interval holds at the rate it was inferred at; timed at another rate, its ends move.
    same_rate = infer_at == prefill_tok_s
    hours_range = (split.hours_range if same_rate else None) or (min(ends), max(ends))
    window = profile.window_hours_in_period
    q = hours / window
    if q > 1:
        shown = f"{hours:,.1f}" if hours < 1e9 else f"{hours:.3g}"
        raise InputError(
            f"profile {profile.name}: {shown} hours generating do not fit in its window of {window:g} hours "
            f"({profile.active_days:g} active days × {profile.window_hours:g} h); check its tokens and the rates"
        )
    return ProfileTiming(
        profile=profile.name,
        stream_tok_s=stream_tok_s,
        prefill_tok_s=prefill_tok_s,
        output_tokens=split.output,
        new_input_tokens=split.new_input,
        cached_read_tokens=split.cached_read,
        split=split.kind,
        output_tokens_range=split.output_range,
        new_input_tokens_range=split.new_input_range,
        hours_generating=hours,
        hours_generating_range=hours_range,
        fraction_of_period=hours / (profile.period_days * HOURS_PER_DAY),
        window_hours_in_period=window,
        q=q,
        q_range=(hours_range[0] / window, hours_range[1] / window),
        split_basis=split.basis,
        split_prefill_tok_s=infer_at if split.kind == "inferred" else None,
    )


def output_tokens_per_hour_of_period(profile: UsageProfile, output_tokens: float | None = None) -> float:
    """A developer's output tokens per wall-clock hour of the period (for volume: output over a month).

    ``output_tokens``: the period's output when the split is inferred (from :func:`profile_timing`); a profile that
    gives its split needs none.
    """
    if output_tokens is None:
        output_tokens = token_split(profile).output
    return output_tokens / (profile.period_days * HOURS_PER_DAY)


def _format_errors(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(profile)"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_profile(data: Any, where: str = "profile") -> UsageProfile:
    """Validate a profile from parsed YAML/JSON; InputError names ``where``, each bad field and what is wrong."""
    if not isinstance(data, dict):
        raise InputError(f"{where} is not a usage profile: expected a mapping of fields, got {type(data).__name__}")
    try:
        return UsageProfile.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{where} is not a valid usage profile:\n{_format_errors(e)}") from e


def load_profile(path: Path | str) -> UsageProfile:
    path = Path(path)
    if kind_of(path) is None:  # anything else there is named for what it is by read_yaml
        raise InputError(f"usage profile {path} does not exist; profiles live in configs/profiles/*.yaml")
    from offload_lab.core.inputs import read_yaml

    data = read_yaml(path, "usage profile", expect=None)  # bounded, UTF-8 checked; parse_profile checks the shape
    return parse_profile(data, where=f"usage profile {path}")
