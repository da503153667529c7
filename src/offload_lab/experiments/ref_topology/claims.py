"""Claims of experiment ``ref_topology``: one per derived figure (see :mod:`offload_lab.published.refclaims`)."""

from __future__ import annotations

from offload_lab.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef
from offload_lab.paper.formats import fmt_pct

SECTION: dict[str, ClaimDef] = {}
EXP = "ref_topology"

SPECS = (
    ("slower_low", fmt_pct(0), "fraction", "How much slower per token pod 2 was, low end"),
    ("slower_high", fmt_pct(0), "fraction", "How much slower per token pod 2 was, high end"),
    ("rate_kept_low", fmt_pct(0), "fraction", "Pod 2's rate as a share of pod 1's, low end"),
    ("rate_kept_high", fmt_pct(0), "fraction", "Pod 2's rate as a share of pod 1's, high end"),
    ("spread", "{:.2f}", "ratio", "High end of the published ratio over its low end"),
)
declare_derived(SECTION, EXP, SPECS)
