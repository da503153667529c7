"""Claims of experiment ``ref_model``: one per derived figure (see :mod:`offload_lab.experiments.published.refclaims`)."""

from __future__ import annotations

from offload_lab.experiments.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef
from offload_lab.paper.formats import fmt_int, fmt_pct

SECTION: dict[str, ClaimDef] = {}
EXP = "ref_model"

SPECS = (
    ("routed_experts", fmt_int, "experts", "Routed experts, layers times experts per layer"),
    ("params_community_b", "{:,.1f}", "billion", "Parameters the community page counts, backbone plus Engram"),
    ("params_gap_b", "{:,.1f}", "billion", "Total parameters less the community page's count"),
    ("active_share", fmt_pct(1), "fraction", "Share of the parameters active per token"),
    ("experts_active_share", fmt_pct(1), "fraction", "Share of a layer's routed experts a token uses"),
    ("bf16_gb", "{:,.1f}", "GB", "BF16 weight size, parameters times two bytes"),
    ("engram_gib_1byte", "{:,.1f}", "GiB", "Engram tables at one byte a parameter"),
    ("engram_gib_int4", "{:,.1f}", "GiB", "Engram tables at four bits a parameter"),
    ("exl3_over_official", fmt_pct(0), "ratio", "EXL3 pack as a share of the official checkpoint"),
    ("gen30_host_share", fmt_pct(1), "fraction", "Share of routed experts the gen30 plan moves to host"),
    ("gen30_host_per_layer", "{:,.1f}", "experts", "gen30's host experts per layer, on average"),
    ("overshoot_gib", "{:,.1f}", "GiB", "How far the model overshoots a GPU's usable memory"),
    ("gen30_freed_gib", "{:,.1f}", "GiB", "What the gen30 plan frees on each GPU"),
    ("gen30_headroom_gib", "{:,.1f}", "GiB", "Usable memory left on each GPU with the gen30 plan"),
    ("boots", fmt_int, "boots", "Boots in the published table"),
    ("boots_ready", fmt_int, "boots", "Published boots that loaded and served"),
    ("boots_failed", fmt_int, "boots", "Published boots that did not serve"),
    ("boots_oom_load", fmt_int, "boots", "Published boots out of memory at load"),
    ("expert_mb", "{:.2f}", "MB", "One routed expert at three bits"),
    ("host_mb_per_token", "{:,.0f}", "MB", "gen30: bytes a GPU reads from host per token, one stream"),
    ("bound_gen30_raw_ms", "{:.1f}", "ms", "gen30's TPOT lower bound, one stream, raw link"),
    ("bound_gen30_meas_ms", "{:.1f}", "ms", "gen30's TPOT lower bound, one stream, measured link rate"),
    ("bound_gen30_four_ms", "{:.1f}", "ms", "gen30's step bound at four streams"),
    ("measured_four_ms", "{:.1f}", "ms", "Measured time per token of an agent among four"),
    ("measured_vs_bound", "{}", "", "The published TPOT against gen30's bound"),
    ("bound_more_raw_ms", "{:.1f}", "ms", "TPOT lower bound with half the experts on host"),
    ("bound_more_over_gen30", "{:.2f}", "ratio", "That bound over gen30's"),
    ("host_gib_exact_expert", "{:.1f}", "GiB", "gen30's pinned experts, exact"),
    ("host_gib_pow2_expert", "{:.1f}", "GiB", "gen30's pinned experts, one block an expert, rounded to a power of two"),
    ("host_gib_exact_layer", "{:.1f}", "GiB", "gen30's pinned experts, exact (one block a layer)"),
    ("host_gib_pow2_layer", "{:.1f}", "GiB", "gen30's pinned experts, one block a layer, rounded to a power of two"),
)
declare_derived(SECTION, EXP, SPECS, compares={"routed_experts": "routed_experts",
                                               "params_community_b": "params_community_b", "bf16_gb": "bf16_gb",
                                               "engram_gib_1byte": "engram_gib_1byte",
                                               "bound_gen30_raw_ms": "tpot_4k_ms", "bound_gen30_meas_ms": "tpot_4k_ms"})
