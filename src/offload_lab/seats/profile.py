"""Usage profiles: how much one developer's coding agent generates, and so how often it needs a stream.

A profile (``configs/profiles/*.yaml``) states a developer's tokens over a period, split into output tokens (what the
model writes, at the per-stream decode rate), new input tokens (prefilled once, at the prefill rate) and cached reads
(context the server reads again from its prefix cache; taken here as free, since a cache hit skips the prefill). It
also states the sessions, the active days and the daily window the developer works in.

From a profile, a per-stream output rate and a prefill rate follow the hours spent generating, their fraction of the
period, and ``q``: the chance that the developer is generating at a given moment of the window. ``q`` is what the
seat models in :mod:`offload_lab.seats.capacity` take.

A profile may give the split outright (``output``, ``new_input``, ``cached_read``) or, as the published one does, a
total and the number of context tokens re-read per token written. Then only the written tokens are known, not how
they divide into output and new input; they are all timed at the output rate, which makes the hours an upper bound
(prefill is faster than decoding) and says so in :class:`ProfileTiming.split_known`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from offload_lab.core.errors import InputError

HOURS_PER_DAY = 24.0


class Provenance(BaseModel):
    """Where a profile's figures come from; a profile without a source is an assumption and says so."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["published", "measured", "assumed"]
    source: str = Field(description="file, URL or person the figures come from")
    section: str | None = Field(None, description="section of the source")
    source_sha256: str | None = Field(None, description="sha256 of the source file when it was transcribed")
    note: str = ""


class TokenCounts(BaseModel):
    """A developer's tokens over the profile's period. Give the split, or a total and the re-read ratio."""

    model_config = ConfigDict(extra="forbid")

    total: float | None = Field(None, ge=0, description="all tokens the provider counted in the period")
    output: float | None = Field(None, ge=0, description="tokens the model generated")
    new_input: float | None = Field(None, ge=0, description="input tokens prefilled for the first time")
    cached_read: float | None = Field(None, ge=0, description="context tokens read again from the prefix cache")
    cached_reads_per_written_token: float | None = Field(
        None, ge=0, description="context tokens re-read per token written (output plus new input)"
    )

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
        if self.total is not None and self.cached_reads_per_written_token is not None:
            if any(p is not None for p in parts):
                raise ValueError(
                    "give either output, new_input and cached_read, or total and cached_reads_per_written_token, "
                    "not a mix"
                )
            return self
        raise ValueError(
            "tokens need either output, new_input and cached_read, or total and cached_reads_per_written_token"
        )


class PublishedFigures(BaseModel):
    """Figures the source derived from the profile; kept to compare with what this project computes, never used."""

    model_config = ConfigDict(extra="forbid")

    hours_generating: float | None = Field(None, ge=0)
    fraction_of_period: float | None = Field(None, ge=0, le=1)
    q: float | None = Field(None, ge=0, le=1)
    stream_tok_s: float | None = Field(None, gt=0, description="the output rate the source timed tokens at")


class UsageProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    provenance: Provenance
    period_days: float = Field(gt=0, description="length of the period the tokens were counted over, in days")
    active_days: float = Field(gt=0, description="days of the period the developer worked")
    sessions: int = Field(ge=0, description="agent sessions in the period")
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
    split_known: bool  # False: output holds every written token (output + new input), new_input is 0

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
    split_known: bool
    hours_generating: float
    fraction_of_period: float
    window_hours_in_period: float
    q: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def token_split(tokens: TokenCounts) -> TokenSplit:
    if tokens.output is not None and tokens.new_input is not None and tokens.cached_read is not None:
        return TokenSplit(tokens.output, tokens.new_input, tokens.cached_read, split_known=True)
    assert tokens.total is not None and tokens.cached_reads_per_written_token is not None  # the validator saw to it
    written = tokens.total / (1.0 + tokens.cached_reads_per_written_token)
    return TokenSplit(output=written, new_input=0.0, cached_read=tokens.total - written, split_known=False)


def profile_timing(profile: UsageProfile, stream_tok_s: float, prefill_tok_s: float | None = None) -> ProfileTiming:
    """Hours generating = output / stream rate + new input / prefill rate; q = those hours / the window's hours.

    Raises InputError when a rate is not positive, when the profile has new input tokens and no prefill rate is
    given, or when the hours generating do not fit in the window (q above 1: the profile and rates disagree).
    """
    if not stream_tok_s > 0:
        raise InputError(f"the per-stream output rate must be positive tokens/s, not {stream_tok_s!r}")
    if prefill_tok_s is not None and not prefill_tok_s > 0:
        raise InputError(f"the prefill rate must be positive tokens/s, not {prefill_tok_s!r}")
    split = token_split(profile.tokens)
    if split.new_input > 0 and prefill_tok_s is None:
        raise InputError(
            f"profile {profile.name} has {split.new_input:,.0f} new input tokens: give a prefill rate (tokens/s) to "
            "time them"
        )
    seconds = split.output / stream_tok_s + (split.new_input / prefill_tok_s if split.new_input else 0.0)
    hours = seconds / 3600.0
    window = profile.window_hours_in_period
    q = hours / window
    if q > 1:
        raise InputError(
            f"profile {profile.name}: {hours:,.1f} hours generating do not fit in its window of {window:g} hours "
            f"({profile.active_days:g} active days × {profile.window_hours:g} h); check its tokens and the rates"
        )
    return ProfileTiming(
        profile=profile.name,
        stream_tok_s=stream_tok_s,
        prefill_tok_s=prefill_tok_s,
        output_tokens=split.output,
        new_input_tokens=split.new_input,
        cached_read_tokens=split.cached_read,
        split_known=split.split_known,
        hours_generating=hours,
        fraction_of_period=hours / (profile.period_days * HOURS_PER_DAY),
        window_hours_in_period=window,
        q=q,
    )


def output_tokens_per_hour_of_period(profile: UsageProfile) -> float:
    """A developer's output tokens per wall-clock hour of the period (for volume: output over a month)."""
    return token_split(profile.tokens).output / (profile.period_days * HOURS_PER_DAY)


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
    if not path.is_file():
        raise InputError(f"usage profile {path} does not exist; profiles live in configs/profiles/*.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise InputError(f"usage profile {path} is not valid YAML: {e}") from e
    return parse_profile(data, where=f"usage profile {path}")
