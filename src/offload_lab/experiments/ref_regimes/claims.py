"""Claims of experiment ``ref_regimes``: one per derived figure (see :mod:`offload_lab.experiments.published.refclaims`)."""

from __future__ import annotations

from offload_lab.experiments.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef
from offload_lab.paper.formats import fmt_int, fmt_pct, fmt_sig

SECTION: dict[str, ClaimDef] = {}
EXP = "ref_regimes"

SPECS = (
    ("bar_ms", fmt_int, "ms", "The bar in milliseconds per token"),
    ("held_up_to", fmt_int, "streams", "Most agents whose published median holds the bar"),
    ("first_below", fmt_int, "streams", "First published agent level below the bar"),
    ("lost_low", fmt_int, "streams", "Low end of the published range where the bar was lost"),
    ("lost_high", fmt_int, "streams", "High end of that range"),
    ("provisioning", fmt_int, "streams", "Agents the published table supports with the margin"),
    ("total_at_four", fmt_int, "tokens/s", "Per-agent median at four agents times four"),
    ("falloff_four", fmt_pct(0), "fraction", "Drop of the per-agent median from one agent to four"),
    ("reply_s_alone", fmt_sig(2), "s", "A reply's time with one agent"),
    ("reply_s_at_bar", fmt_sig(2), "s", "A reply's time at the bar"),
    ("new_per_reply", "{:.2f}", "ratio", "Context growth a turn over the reply's tokens"),
    ("kv_contexts_128k", "{:.1f}", "contexts", "128K contexts the KV cache holds at least"),
    ("kv_tokens_min", lambda v: f"{float(v) / 1e6:.2f}", "million tokens", "Tokens the KV cache holds at least"),
)
declare_derived(SECTION, EXP, SPECS, compares={"bar_ms": "bar_ms_per_token", "held_up_to": "bar_kept_streams",
                                               "provisioning": "provisioning_streams",
                                               "total_at_four": "agents_4_total_tok_s"})
