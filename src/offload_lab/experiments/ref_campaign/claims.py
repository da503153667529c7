"""Claims of experiment ``ref_campaign``: one per derived figure (see :mod:`offload_lab.published.refclaims`)."""

from __future__ import annotations

from typing import Any

from offload_lab.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef, Sources, claim
from offload_lab.paper.formats import fmt_as_printed, fmt_int, fmt_pct, fmt_signed, table_value

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
    ("page_rows", fmt_int, "rows", "Rows of the community page's memory-math table"),
    ("page_smallest_agree", fmt_int, "rows", "Rows whose smallest common memory size is recomputed as printed"),
    ("page_weight_max_diff_gb", fmt_signed("{:.1f}"), "GB", "The largest weight difference, recomputed less printed"),
    ("page_weight_max_diff_pct", fmt_signed(lambda v: f"{100 * v:.2f}%"), "fraction",
     "That difference as a share of the printed weight"),
    ("page_weight_max_diff_format", "{}", "", "The format of that row"),
    ("page_weights_within", fmt_int, "rows", "GGUF rows whose weight is within 0.5% of the printed one"),
    ("page_gguf_rows", fmt_int, "rows", "GGUF rows of the page's table"),
    ("native_gb_from_official", "{:,.1f}", "GB", "The native release's size, from the official checkpoint's GiB"),
    ("rig_offload_gb", fmt_int, "GB", "GPU memory and system RAM of the page's rig that states both"),
    ("rig_offload_build", "{}", "", "That rig"),
    ("rig_smallest_gguf_gb", "{:,.1f}", "GB", "The smallest recomputed weight of the page's table"),
    ("rig_holds_smallest", "{}", "", "Whether that rig holds it by the page's rule"),
)
declare_derived(SECTION, EXP, SPECS, compares={"native_gb_from_official": "cmm_native_gb"})


def _gb(v: Any) -> str:
    return "–" if v is None or v != v else f"{float(v):,.1f}"


@claim("ref_campaign.page_table", experiment=EXP, files=["page_memory_math.csv"], kind="table", registry=SECTION)
def _page_table(src: Sources) -> dict[str, Any]:
    """The community page's memory-math table, each printed row beside its recomputation on the page's rule and
    ladder (offload-lab memory-math --ladder community-page)."""
    t = src.csv("page_memory_math.csv")
    signed = fmt_signed("{:.1f}")
    rows = []
    for _, r in t.iterrows():
        bits = "–" if r["bits_per_weight"] != r["bits_per_weight"] else f"{r['bits_per_weight']:.2f}"
        native = r["bits_per_weight"] != r["bits_per_weight"]  # no bits per weight: the page prints "≈511 GB"
        printed = f"about {fmt_as_printed(r['printed_weight_gb'])}" if native else _gb(r["printed_weight_gb"])
        diff = "–" if r["weight_difference_gb"] != r["weight_difference_gb"] else signed(r["weight_difference_gb"])
        rows.append([str(r["format"]), bits, printed, _gb(r["weight_gb"]), diff,
                     fmt_int(r["printed_smallest_memory_gb"]), fmt_int(r["smallest_memory_gb"])])
    return table_value(["Format", "Bits/weight", "Printed GB", "Recomputed GB", "Difference",
                        "Printed smallest GB", "Recomputed smallest GB"], rows, "lrrrrrr")
