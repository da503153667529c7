"""Claims of experiment ``ref_context``: one per derived figure (see :mod:`offload_lab.published.refclaims`)."""

from __future__ import annotations

from offload_lab.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef
from offload_lab.paper.formats import fmt_int, fmt_pct

SECTION: dict[str, ClaimDef] = {}
EXP = "ref_context"

SPECS = (
    ("context_ratio", fmt_int, "times", "How many times longer the longest TPOT prompt is than the shortest"),
    ("tpot_ratio", "{:.2f}", "ratio", "Median TPOT after the longest prompt over that after the shortest"),
    ("slower_writing", fmt_pct(1), "fraction", "How much slower writing is after the longest prompt"),
    ("tpot_growth_per_doubling", fmt_pct(1), "fraction", "TPOT growth per doubling of the context"),
    ("decode_tok_s_4k", fmt_int, "tokens/s", "One stream's decode rate after a 4K prompt"),
    ("decode_tok_s_256k", fmt_int, "tokens/s", "One stream's decode rate after a 256K prompt"),
    ("prefill_tok_s_128k", fmt_int, "tokens/s", "Prefill rate of the fresh 128K prompt"),
    ("prefill_tok_s_260k", fmt_int, "tokens/s", "Prefill rate of the fresh 260,000-token prompt"),
    ("prefill_marginal_tok_s", fmt_int, "tokens/s", "Prefill rate of the tokens between the two fresh prompts"),
    ("ttft_ratio", "{:.2f}", "ratio", "TTFT of the longer fresh prompt over the shorter"),
    ("prompt_ratio", "{:.2f}", "ratio", "Tokens of the longer fresh prompt over the shorter"),
    ("shared_tpot_over_single", "{:.2f}", "ratio", "Four users' TPOT on a cached 256K prefix over one request's"),
    ("shared_tok_s_per_user", fmt_int, "tokens/s", "Each of the four users' decode rate"),
    ("shared_over_bar", "{:.2f}", "ratio", "A user's rate on the cached prefix over the bar"),
    ("cached_speedup", fmt_int, "times", "Fresh 260,000-token TTFT over the cached prefix's p95 TTFT"),
)
declare_derived(SECTION, EXP, SPECS, compares={"context_ratio": "context_ratio_long_short",
                                               "slower_writing": "context_slower_writing"})
