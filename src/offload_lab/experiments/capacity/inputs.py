"""The inputs of the seat and cost analysis, gathered from a ``published`` run, each with where it came from.

Every value the capacity and cost experiments use is either a published figure (read from the run's files, with the
run, file, sha256, key and section recorded) or computed here from published figures (with the formula and the keys
it used). The two experiments share this module so that they cannot disagree about an input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from offload_lab.seats import capacity
from offload_lab.experiments.published import runner as published
from offload_lab.core.errors import InputError
from offload_lab.seats.profile import ProfileTiming, UsageProfile, profile_timing

QSource = Literal["published", "profile"]


class StudyParams(BaseModel):
    """What the capacity and cost experiments both read: which run, which profile, which q."""

    model_config = ConfigDict(extra="forbid")

    published_experiment: str = Field("published", description="experiment of the campaign holding the inputs")
    profile: str = Field("published-week", description="usage profile (its name) in that run")
    q_source: QSource = Field("published", description="'published': the study's q; 'profile': q computed here")


@dataclass
class StudyInputs:
    q: float
    q_source: QSource
    streams_per_pod: int
    alpha: float  # the seat rule's α
    alpha_also: float  # the second α the study reports
    team_sizes: list[int]
    bar_tok_s: float
    pod_output_tok_s: float  # the pod's total output at the provisioning load, for seats by volume
    turn_seconds: float  # one agent reply at the bar
    prefill_tok_s: float
    pod_eur_per_hour: float
    seat_eur_per_month: float
    profile: UsageProfile
    timing: ProfileTiming
    streams_at_bar_from_table: int
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def alphas(self) -> list[float]:
        return [self.alpha, self.alpha_also]

    def record(self) -> dict[str, Any]:
        """What ``inputs.json`` holds: every value and where it came from."""
        values = {k: getattr(self, k) for k in (
            "q", "q_source", "streams_per_pod", "alpha", "alpha_also", "team_sizes", "bar_tok_s",
            "pod_output_tok_s", "turn_seconds", "prefill_tok_s", "pod_eur_per_hour", "seat_eur_per_month",
            "streams_at_bar_from_table")}
        return {"values": values, "profile": self.profile.name, "timing": self.timing.to_dict(),
                "provenance": self.provenance}


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
    prefill = num("prefill_prompt_tokens") / num("prefill_ttft_s")
    # The summary's hours time new input "at the measured prefill rate" without saying which; this is its longest
    # fresh prefill (E4/E5), the rate the split of the week is inferred at (docs/seats-and-cost.md says why).
    prov["prefill_tok_s"] = {"formula": "prefill_prompt_tokens / prefill_ttft_s",
                             "why": "the longest fresh prefill the study measured; the split of the week is inferred "
                                    "at this rate"}
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
    alphas = (num("alpha"), num("alpha_also"))
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
        alpha=alphas[0],
        alpha_also=alphas[1],
        team_sizes=[int(t) for t in teams],
        bar_tok_s=bar,
        pod_output_tok_s=num("agents_4_total_tok_s"),
        turn_seconds=turn,
        prefill_tok_s=prefill,
        pod_eur_per_hour=num("pod_eur_per_hour"),
        seat_eur_per_month=num("seat_eur_per_month"),
        profile=profile,
        timing=timing,
        streams_at_bar_from_table=from_table,
        provenance=prov,
    )
