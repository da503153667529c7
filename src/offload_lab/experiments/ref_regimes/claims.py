"""Claims of experiment ``ref_regimes``: one per derived figure (see :mod:`offload_lab.published.refclaims`)."""

from __future__ import annotations

from offload_lab.published.refclaims import CITES, declare_derived
from offload_lab.paper.claims import ClaimDef
from offload_lab.paper.formats import fmt_int, fmt_pct, fmt_sig

SECTION: dict[str, ClaimDef] = {}
EXP = "ref_regimes"

SPECS = (
    ("bar_ms", fmt_int, "ms", "The bar in milliseconds per token"),
    ("held_up_to", fmt_int, "streams", "Most agent streams whose published median clears the bar"),
    ("margin_at_held", "{:g}", "tokens/s", "The published median at that level less the bar"),
    ("first_below", fmt_int, "streams", "First published agent level below the bar"),
    ("lost_low", fmt_int, "streams", "Low end of the published range where the bar was lost"),
    ("lost_high", fmt_int, "streams", "High end of that range"),
    ("provisioning", fmt_int, "streams", "Agents the published table supports with the margin"),
    ("total_at_four", fmt_int, "tokens/s", "Four agents' per-stream medians summed (not the server's total)"),
    ("falloff_four", fmt_pct(0), "fraction", "Drop of the per-agent median from one agent to four"),
    ("reply_s_alone", fmt_sig(2), "s", "A reply's time with one agent"),
    ("reply_s_at_bar", fmt_sig(2), "s", "A reply's time at the bar"),
    ("new_per_reply", "{:.2f}", "ratio", "Context growth a turn over the reply's tokens"),
    ("kv_contexts_128k", "{:.1f}", "contexts", "128K contexts the KV cache holds at least"),
    ("kv_tokens_min", lambda v: f"{float(v) / 1e6:.2f}", "million tokens", "Tokens the KV cache holds at least"),
)
declare_derived(SECTION, EXP, SPECS, compares={"bar_ms": "bar_ms_per_token", "held_up_to": "six_streams",
                                               "provisioning": "provisioning_streams"})
# The paper's "cleared 40 by less than one token per second": the published median at six less the bar.
CITES.setdefault("six_streams_margin_tok_s", []).append("ref_regimes.margin_at_held")
