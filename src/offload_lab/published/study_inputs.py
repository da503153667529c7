"""The inputs of the seat and cost analysis, each with where it came from: a ``published`` run, or the campaign's own
measured runs (:mod:`offload_lab.published.measured_inputs`).

Every value the capacity and cost experiments use is either a published figure (read from the run's files, with the
run, file, sha256, key and section recorded), a measurement (read from a run of this campaign, with the run, file and
sha256), a setting of the campaign file (with its stated source where it is a price), or computed here from those
(with the formula and the keys it used). The two experiments share this module so that they cannot disagree about an
input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from offload_lab.seats import capacity
from offload_lab.published import transcription as published
from offload_lab.core.errors import InputError
from offload_lab.seats.joint import JointInference, infer_jointly, joint_timing
from offload_lab.seats.profile import ProfileTiming, UsageProfile, profile_timing

QSource = Literal["published", "profile"]
Source = Literal["published", "measured"]
# Set only with ``source: measured`` (a published run carries its own).
MEASURED_ONLY = ("seat_price_per_month", "seat_price_source", "seat_alphas", "team_sizes")
PUBLISHED_CURRENCY = "EUR"  # the study's prices (E12: "3.73 EUR an hour", "180 EUR a seat a month")


class StudyParams(BaseModel):
    """What the capacity and cost experiments both read: where the inputs come from, which profile, which q."""

    model_config = ConfigDict(extra="forbid")

    source: Source = Field("published", description="'published': every input from a published run; 'measured': "
                                                    "from this campaign's own runs and the campaign file")
    published_experiment: str = Field("published", description="source published: experiment holding the inputs")
    profile: str = Field("published-week", description="usage profile: with source published, its name in that run; "
                                                       "with measured, a file (configs/profiles/*.yaml, a ccusage "
                                                       "daily or session JSON export) or a name in configs/profiles/")
    q_source: QSource = Field("published", description="'published': the profile's published q; 'profile': q "
                                                       "computed here from the profile's tokens")
    streams_from: Literal["agent_turns", "concurrency"] = Field(
        "agent_turns", description="measured: which sweep sets the streams kept at the bar and the pod's output")
    streams_experiment: str | None = Field(None, description="measured: that sweep's experiment name in the campaign "
                                                             "(default: the same as streams_from)")
    regime: str | None = Field(None, description="measured, streams_from concurrency: the regime whose sweep counts")
    prefill_experiment: str = Field("context", description="measured: the experiment whose longest fresh prompt "
                                                           "gives the prefill rate")
    price_stack: str | None = Field(None, description="measured: stack file whose price block prices the pod "
                                                      "(default: the stack the streams run ran against)")
    seat_price_per_month: float | None = Field(None, gt=0, description="measured: a subscription seat's price a "
                                                                       "month, in seat_currency")
    seat_price_source: str | None = Field(None, min_length=1, description="measured: where that price comes from")
    seat_currency: str = Field("EUR", pattern=r"^[A-Z]{3}$", description="the currency of the seat price")
    seat_alphas: list[float] | None = Field(None, description="measured: the seat rule's α first, then any others "
                                                              "to report")
    team_sizes: list[int] | None = Field(None, description="measured: the team sizes to size and cost")
    transcription: str = Field("configs/published/study.yaml",
                               description="measured: the published figures set beside the measured ones")
    window_hours: float = Field(8.0, gt=0, le=24, description="measured, a usage export: the daily working window "
                                                              "(an export has none; an assumption)")
    sessions: int | None = Field(None, ge=1, description="measured, a ccusage daily export: sessions in the period "
                                                         "(default one a day)")

    @model_validator(mode="before")
    @classmethod
    def _old_price_key(cls, data: Any) -> Any:
        # Campaign files written before prices carried their currency name the seat price in euros.
        if isinstance(data, dict) and "seat_eur_per_month" in data:
            if "seat_price_per_month" in data:
                raise ValueError("give seat_price_per_month once (seat_eur_per_month is its old name)")
            if data.get("seat_currency", PUBLISHED_CURRENCY) != PUBLISHED_CURRENCY:
                raise ValueError("seat_eur_per_month is a price in EUR, and seat_currency is "
                                 f"{data['seat_currency']}; give seat_price_per_month instead")
            data = {k: v for k, v in data.items() if k != "seat_eur_per_month"} | {
                "seat_price_per_month": data["seat_eur_per_month"]}
        return data

    @field_validator("seat_alphas")
    @classmethod
    def _alphas(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (not v or any(not (0 < a < 1) for a in v) or len(set(v)) != len(v)):
            raise ValueError("seat_alphas is the seat rule's α first, then any others to report: distinct numbers "
                             "in (0, 1)")
        return v

    @field_validator("team_sizes")
    @classmethod
    def _teams(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(t < 1 for t in v)):
            raise ValueError("team_sizes must be whole numbers of developers, at least 1")
        return v

    @model_validator(mode="after")
    def _source_fields(self) -> "StudyParams":
        given = [k for k in MEASURED_ONLY if getattr(self, k) is not None]
        if self.source == "published" and given:
            raise ValueError(f"{given} are set by the published run with source: published; leave them out, or use "
                             "source: measured")
        if self.source == "published" and self.seat_currency != PUBLISHED_CURRENCY:
            # the published run's prices are the study's (E12, in EUR): another currency would relabel them
            raise ValueError(f"seat_currency {self.seat_currency}: the published prices are in {PUBLISHED_CURRENCY} "
                             "(E12); another currency applies with source: measured and a seat price in it")
        if self.source == "measured":
            missing = [k for k in MEASURED_ONLY if getattr(self, k) is None]
            if missing:
                raise ValueError(f"source: measured takes {missing} from the campaign file; give them (the seat "
                                 "price with its source)")
            if self.streams_from == "concurrency" and not self.regime:
                raise ValueError("streams_from: concurrency needs regime, the regime whose sweep counts")
        return self

    def reads_experiments(self) -> list[str]:
        """The campaign experiments whose runs this one reads (the campaign runs them first)."""
        if self.source == "published":
            return [self.published_experiment]
        return [self.streams_experiment or self.streams_from, self.prefill_experiment]


@dataclass
class StudyInputs:
    q: float
    q_source: QSource
    streams_per_pod: int
    alphas: list[float]  # the seat rule's α first, then the others reported
    team_sizes: list[int]
    bar_tok_s: float
    pod_output_tok_s: float  # the pod's total output at the provisioning load, for seats by volume
    turn_seconds: float  # one agent reply at the bar
    prefill_tok_s: float
    pod_price_per_hour: float | None  # None: no price in the seat's currency (cost refuses, naming the reason)
    seat_price_per_month: float
    currency: str  # of both prices
    profile: UsageProfile
    timing: ProfileTiming
    streams_at_bar_from_table: int
    provenance: dict[str, Any] = field(default_factory=dict)
    source: Source = "published"
    published_beside: dict[str, Any] | None = None  # published figures printed beside measured ones
    joint: dict[str, Any] | None = None  # the week's split and prefill rate inferred jointly (seats.joint), recorded

    @property
    def alpha(self) -> float:
        """The seat rule's α."""
        return self.alphas[0]

    def record(self) -> dict[str, Any]:
        """What ``inputs.json`` holds: every value and where it came from."""
        values = {k: getattr(self, k) for k in (
            "source", "q", "q_source", "streams_per_pod", "alpha", "alphas", "team_sizes", "bar_tok_s",
            "pod_output_tok_s", "turn_seconds", "prefill_tok_s", "pod_price_per_hour", "seat_price_per_month",
            "currency", "streams_at_bar_from_table")}
        return {"values": values, "profile": self.profile.name, "timing": self.timing.to_dict(),
                "provenance": self.provenance, "published_beside": self.published_beside, "joint": self.joint}

    def price_or_fail(self) -> float:
        """The pod's price an hour; InputError saying why there is none (no price block, another currency)."""
        if self.pod_price_per_hour is None:
            why = (self.provenance.get("pod_price_per_hour") or {}).get("missing", "no price was found")
            raise InputError(f"the cost needs the pod's price an hour: {why}. Give the stack file a price block, or "
                             "name one with price_stack in the campaign file")
        return self.pod_price_per_hour


def gather(pub: published.Published, profile_name: str, q_source: QSource = "published") -> StudyInputs:
    """Read every input from ``pub``; ``q_source`` chooses the published q or the one computed from the profile."""
    fig = "figures.json"
    prov: dict[str, Any] = {"published_run": {"path": pub.run_ref, "run_id": pub.manifest.get("run_id"),
                                              "provenance": pub.manifest.get("provenance")}}

    def num(key: str) -> float:
        prov[key] = pub.source_ref(fig, key)
        return pub.number(key)

    profile = pub.profile(profile_name)
    bar = num("bar_tok_s_per_stream")
    jointly = joint_inference(pub, profile, bar, prov)
    if jointly is not None:
        # The summary's hours time new input "at the measured prefill rate" without naming it: the rate is inferred
        # with the week's split from every published figure at once (hours, share, q, the volumes; seats.joint).
        prefill = jointly.prefill_tok_s
        prov["prefill_tok_s"] = {"formula": "inferred with the week's split from every published figure at once",
                                 "range": list(jointly.prefill_tok_s_range), "binding": jointly.binding}
        timing = joint_timing(profile, jointly, bar)
    else:
        # A published run without the derived figures (volumes): the longest fresh prefill (E4/E5) stands in.
        prefill = num("prefill_prompt_tokens") / num("prefill_ttft_s")
        prov["prefill_tok_s"] = {"formula": "prefill_prompt_tokens / prefill_ttft_s",
                                 "why": "the longest fresh prefill the study measured; the published run holds no "
                                        "volumes to infer the rate from"}
        timing = profile_timing(profile, stream_tok_s=bar, prefill_tok_s=prefill)
    prov["timing"] = {"profile": pub.source_ref(f"profile-{profile.name}.json"),
                      "stream_tok_s": "bar_tok_s_per_stream", "prefill_tok_s": "prefill_tok_s"}
    if q_source == "published":
        if profile.published is None or profile.published.q is None:
            raise InputError(f"profile {profile.name} states no published q; use q_source: profile")
        q = profile.published.q
        prov["q"] = {**pub.source_ref(f"profile-{profile.name}.json"), "field": "published.q",
                     "section": profile.provenance.section}
    elif q_source == "profile":
        q = timing.q
        prov["q"] = {"formula": "hours generating / window hours, from the profile's tokens at the bar rate",
                     "split": timing.split, "range": list(timing.q_range)}
    else:
        raise InputError(f"q_source must be 'published' or 'profile', not {q_source!r}")

    table = pub.table("agent_turns")
    prov["agent_turns"] = pub.source_ref("agent_turns.csv")
    from_table = capacity.streams_at_bar(table["streams"], table["median_tok_s"], bar, num("provisioning_margin"))
    alphas = [num("alpha"), num("alpha_also")]
    teams = pub.value("team_sizes")
    prov["team_sizes"] = pub.source_ref(fig, "team_sizes")
    if not isinstance(teams, list) or not all(float(t).is_integer() and t > 0 for t in teams):
        raise InputError(f"published team_sizes must be a list of whole numbers, not {teams!r}")
    turn = num("agent_reply_tokens") / bar
    prov["turn_seconds"] = {"formula": "agent_reply_tokens / bar_tok_s_per_stream"}
    streams = num("streams_per_pod")
    if not streams.is_integer():
        raise InputError(f"published streams_per_pod {streams} is not a whole number")
    return StudyInputs(
        q=q,
        q_source=q_source,
        streams_per_pod=int(streams),
        alphas=alphas,
        team_sizes=[int(t) for t in teams],
        bar_tok_s=bar,
        pod_output_tok_s=num("agents_4_total_tok_s"),
        turn_seconds=turn,
        prefill_tok_s=prefill,
        # the study's own figures keep their published keys (in EUR, the study's currency)
        pod_price_per_hour=_price(prov, "pod_price_per_hour", num("pod_eur_per_hour"), "pod_eur_per_hour"),
        seat_price_per_month=_price(prov, "seat_price_per_month", num("seat_eur_per_month"), "seat_eur_per_month"),
        currency=PUBLISHED_CURRENCY,
        profile=profile,
        timing=timing,
        streams_at_bar_from_table=from_table,
        provenance=prov,
        joint=None if jointly is None else jointly.record(),
    )


def _price(prov: dict[str, Any], name: str, value: float, published_key: str) -> float:
    """Record a published price under its currency-neutral name (where it came from stays under the published key)."""
    prov[name] = {**prov[published_key], "currency": PUBLISHED_CURRENCY}
    return value


# The published figures the joint inference reads: the seats by volume and their utilizations, the pod's output, and
# the fresh prompts whose prefill rates are checked against the inferred one.
VOLUME_FIGURES = (("volume_devs_full", 1.0), ("volume_devs_half", 0.5))


def joint_inference(pub: published.Published, profile: UsageProfile, bar: float,
                    prov: dict[str, Any]) -> JointInference | None:
    """The week's split and the prefill rate from every published figure at once (:mod:`offload_lab.seats.joint`);
    None when the published run holds no seats by volume or the profile gives its split."""
    if any(key not in pub.figures for key, _ in VOLUME_FIGURES) or profile.tokens.split_given:
        return None

    def printed(key: str) -> str:
        prov[key] = pub.source_ref("figures.json", key)
        f = pub.figures[key]
        return str(f.get("as_published") or f"{pub.number(key):g}")

    volumes = [(printed(key), u) for key, u in VOLUME_FIGURES]
    rates = [(f"{pub.number('ttft_128k_prompt_k'):g}K-token prompt",
              pub.number("ttft_128k_prompt_k") * 1024 / pub.number("ttft_128k_s")),
             (f"{pub.number('prefill_prompt_tokens'):,.0f}-token prompt",
              pub.number("prefill_prompt_tokens") / pub.number("prefill_ttft_s"))]
    for key in ("ttft_128k_prompt_k", "ttft_128k_s", "prefill_prompt_tokens", "prefill_ttft_s"):
        prov[key] = pub.source_ref("figures.json", key)
    return infer_jointly(profile, bar, printed("agents_4_total_tok_s"), volumes, rates)


def gather_for(params: StudyParams, data_root: Path | str, campaign: str) -> tuple[StudyInputs, dict[str, Any]]:
    """The inputs as ``params.source`` says, and what the run's manifest records about where they came from."""
    if params.source == "measured":
        from offload_lab.published.measured_inputs import gather_measured

        inp = StudyInputs(**gather_measured(params, data_root, campaign))
        used = inp.provenance["runs"]
        return inp, {"inputs_source": "measured", "inputs_runs": used}
    pub = published.read_published(data_root, campaign, params.published_experiment)
    inp = gather(pub, params.profile, params.q_source)
    return inp, {"inputs_source": "published", "inputs_run": pub.run_ref, "inputs_run_id": pub.manifest.get("run_id")}
