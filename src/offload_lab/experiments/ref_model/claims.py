"""Claims of experiment ``ref_model``: one per derived figure (see :mod:`offload_lab.published.refclaims`)."""

from __future__ import annotations

import math
from typing import Any

from offload_lab.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef, Sources, claim
from offload_lab.paper.formats import fmt_int, fmt_pct, table_value

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
    ("host_gib_exact_routed_expert", "{:.1f}", "GiB", "gen30's pinned experts, exact"),
    ("host_gib_exact_engram", "{:.1f}", "GiB", "gen30's Engram tables at four bits, pinned, exact"),
    ("host_gib_exact_embedding", "{:.1f}", "GiB", "gen30's token embedding, pinned, exact"),
    ("host_gib_exact_all", "{:.1f}", "GiB", "Everything gen30 moves to host, pinned, exact"),
    ("host_gib_pow2_layer_tensor", "{:.0f}", "GiB",
     "Everything gen30 moves, one block per layer and stacked tensor (and per whole tensor), rounded to powers of two"),
    ("host_gib_pow2_expert", "{:.0f}", "GiB",
     "Everything gen30 moves, one block per expert (and per whole tensor), rounded to powers of two"),
    ("host_blocks_layer_tensor", fmt_int, "blocks", "Pinned blocks with layer-tensor blocks"),
    ("host_blocks_expert", fmt_int, "blocks", "Pinned blocks with one block an expert"),
)
declare_derived(SECTION, EXP, SPECS, compares={"routed_experts": "routed_experts",
                                               "params_community_b": "params_community_b", "bf16_gb": "bf16_gb",
                                               "engram_gib_1byte": "engram_gib_1byte"})


def _ms(v: Any) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.1f}"


@claim("ref_model.bound_table", experiment=EXP, files=["bound_table.csv"], kind="table", registry=SECTION)
def _bound_table(src: Sources) -> dict[str, Any]:
    """The fit layer's TPOT lower bound for each plan, load and link rate, beside the published measurement it can
    be read against (a measurement, in its own column: not a published bound)."""
    t = src.csv("bound_table.csv")
    rows = [[r["plan"], fmt_int(r["streams"]), f"{r['link_gbps']:g}", _ms(r["bound_ms"]), _ms(r["published_ms"]),
             r["published_what"] if isinstance(r["published_what"], str) else ""] for _, r in t.iterrows()]
    return table_value(["Plan", "Streams", "Link GB/s", "Bound ms", "Published ms", "What was measured"], rows,
                       "lrrrrl")
