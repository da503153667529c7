"""Claims of experiment ``ref_campaign``: one per derived figure (see :mod:`offload_lab.experiments.published.refclaims`)."""

from __future__ import annotations

from offload_lab.experiments.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef
from offload_lab.paper.formats import fmt_int, fmt_pct

SECTION: dict[str, ClaimDef] = {}
EXP = "ref_campaign"

SPECS = (
    ("sessions", fmt_int, "sessions", "Sessions of the campaign"),
    ("session_minutes_total", fmt_int, "minutes", "Minutes of the sessions together"),
    ("session_hours_total", "{:.2f}", "hours", "Hours of the sessions together"),
    ("pod_usd_per_session_hour", "{:.2f}", "USD/hour", "Pod cost per hour of session"),
    ("total_usd", "{:.2f}", "USD", "Pod time and API calls together"),
    ("api_share", fmt_pct(1), "fraction", "The API calls' share of the cost"),
    ("stop_episode_rate", fmt_pct(1), "fraction", "Error rate of the episode the stop rule ended"),
    ("stop_rule_fired", "{}", "", "Whether that rate exceeds the rule's"),
    ("later_rule_min_rate", fmt_pct(0), "fraction", "The later rule's least error rate in a sweep of eight"),
    ("e9_usd_same_hours", fmt_int, "USD", "What the sessions' hours would have cost on the E9 baseline"),
    ("e9_over_pod", "{:.1f}", "ratio", "E9's price over the pod's cost per session hour"),
    ("pod_single_tok_s", fmt_int, "tokens/s", "The pod's single-stream rate after a 4K prompt"),
    ("rigs_above_bar", fmt_int, "rigs", "Home rigs at or above the bar"),
    ("rig_fastest_tok_s", "{:g}", "tokens/s", "The fastest home rig"),
    ("pod_over_fastest_rig", "{:.1f}", "ratio", "The pod's single stream over the fastest home rig"),
    ("mm_smallest_gb", fmt_int, "GB", "Smallest weight size on the memory-math rule"),
    ("mm_largest_gb", fmt_int, "GB", "Largest weight size on the memory-math rule"),
)
declare_derived(SECTION, EXP, SPECS)
