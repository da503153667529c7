"""Experiment ``ref_model``: the published model, memory audit (E1) and boots (E2) as data, with what follows.

From the campaign's ``published`` run: the routed experts and the community page's parameters recounted from their
parts, the BF16 and one-byte Engram sizes recomputed from the parameter counts, the share of experts the gen30 plan
moves against the summary's "a third", how far the model overshoots a GPU and what the plan frees, and the boots'
outcomes counted; and what the plan predicts: the TPOT lower bound from the link and HBM bandwidths for gen30 and
for plans with more experts on host (:mod:`offload_lab.fit.predict`), beside the published TPOT, and the pinned host
memory gen30's experts need with and without the allocator's power-of-two rounding (:mod:`offload_lab.fit.host_ram`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.core import runs
from offload_lab.experiments.published import runner as published
from offload_lab.experiments.published.derive import Derivation, Derived, run_reference
from offload_lab.fit import host_ram, predict

EXPERIMENT = "ref_model"
GIB, GB = 2**30, 1e9


def bound_rows(pub: published.Published) -> pd.DataFrame:
    """The fit layer's TPOT lower bound for the published layout on the study's pod, for gen30 and plans with more
    experts on host, at one stream and at the published four, at each link rate (:func:`fit.predict.study_pod_bounds`).
    The layout's counts are the published ones; one expert's bytes and the bandwidths are the fit layer's (the anchor's
    shapes and the vendor's figures: not published)."""
    n = pub.number
    layout = predict.ExpertLayout(layers=int(n("moe_layers")), experts=int(n("experts_per_layer")),
                                  top_k=int(n("experts_active")), expert_bytes=predict.STUDY_LAYOUT.expert_bytes,
                                  tp=int(n("tp")))
    total = layout.layers * layout.experts
    plans = (int(n("gen30_host_experts")), round(0.4 * total), round(0.5 * total))
    rows = []
    for batch in (1, int(n("agents_4_streams"))):
        for r in predict.study_pod_bounds(plans, batch=batch, layout=layout):
            rows.append({k: v for k, v in r.items() if k != "leaves_out"})
    return pd.DataFrame(rows)


def pinned_gib(pub: published.Published, per_layer: bool) -> tuple[float, float]:
    """(exact, rounded) GiB of pinned host memory for gen30's experts on one host (every rank), blocks either one
    per expert share or one per layer and rank, rounded up to a power of two as PyTorch's caching host allocator does
    (:func:`fit.host_ram.pinned_size`)."""
    n = pub.number
    tp, layers, hosted = int(n("tp")), int(n("moe_layers")), int(n("gen30_host_experts"))
    share = int(predict.STUDY_LAYOUT.expert_bytes / tp)
    base, extra = divmod(hosted, layers)
    if per_layer:
        blocks = [share * (base + (1 if i < extra else 0)) for i in range(layers) for _ in range(tp)]
    else:
        blocks = [share] * (hosted * tp)
    return (sum(blocks) / GIB, sum(host_ram.pinned_size(b, True) for b in blocks) / GIB)


def derive(pub: published.Published, params: dict[str, Any]) -> Derivation:
    n = pub.number
    f = [
        Derived("routed_experts", n("moe_layers") * n("experts_per_layer"), "experts", "MoE layers × experts per layer",
                ["moe_layers", "experts_per_layer"], compares="routed_experts"),
        Derived("params_community_b", n("params_community_backbone_b") + n("engram_params_b"), "billion",
                "backbone + Engram tables, as the community page counts", ["params_community_backbone_b",
                                                                             "engram_params_b"],
                compares="params_community_b"),
        Derived("params_gap_b", n("params_total_b") - n("params_community_b"), "billion",
                "total parameters less the community page's count", ["params_total_b", "params_community_b"]),
        Derived("active_share", n("params_active_b") / n("params_total_b"), "fraction",
                "active parameters per token over total parameters", ["params_active_b", "params_total_b"]),
        Derived("experts_active_share", n("experts_active") / n("experts_per_layer"), "fraction",
                "routed experts a token uses over experts per layer", ["experts_active", "experts_per_layer"]),
        Derived("bf16_gb", n("params_total_b") * 1e9 * 2 / GB, "GB", "total parameters × 2 bytes",
                ["params_total_b"], compares="bf16_gb", note="the published figure is an outside estimate"),
        Derived("engram_gib_1byte", n("engram_params_b") * 1e9 / GIB, "GiB", "Engram parameters × 1 byte",
                ["engram_params_b"], compares="engram_gib_1byte"),
        Derived("engram_gib_int4", n("engram_params_b") * 1e9 * n("gen30_engram_bits") / 8 / GIB, "GiB",
                "Engram parameters × 4 bits (the gen30 plan's int4 tables)", ["engram_params_b", "gen30_engram_bits"]),
        Derived("exl3_over_official", n("exl3_pack_gib") / n("official_checkpoint_gib"), "ratio",
                "EXL3 pack over the official checkpoint", ["exl3_pack_gib", "official_checkpoint_gib"]),
        Derived("gen30_host_share", n("gen30_host_experts") / n("gen30_experts_of"), "fraction",
                "experts the gen30 plan moves over all routed experts", ["gen30_host_experts", "gen30_experts_of"],
                note="the summary's words for it: a third"),
        Derived("gen30_host_per_layer", n("gen30_host_experts") / n("moe_layers"), "experts",
                "gen30's host experts per MoE layer, on average", ["gen30_host_experts", "moe_layers"]),
        Derived("overshoot_gib", n("per_gpu_all_on_gpu_gib") - n("usable_gib"), "GiB",
                "what a GPU must hold with every weight on it, less its usable memory",
                ["per_gpu_all_on_gpu_gib", "usable_gib"]),
        Derived("gen30_freed_gib", n("per_gpu_all_on_gpu_gib") - n("per_gpu_gen30_gib"), "GiB",
                "per GPU, all weights on GPU less what the gen30 plan leaves", ["per_gpu_all_on_gpu_gib",
                                                                                  "per_gpu_gen30_gib"]),
        Derived("gen30_headroom_gib", n("usable_gib") - n("per_gpu_gen30_gib"), "GiB",
                "usable memory less what the gen30 plan leaves on a GPU", ["usable_gib", "per_gpu_gen30_gib"]),
    ]
    boots = pub.table("boots")
    counts = boots["outcome"].value_counts()
    f += [
        Derived("boots", int(len(boots)), "boots", "rows of the published boots table", ["boots"]),
        Derived("boots_ready", int(counts.get("ready", 0)), "boots", "boots whose outcome was ready", ["boots"]),
        Derived("boots_failed", int(len(boots) - counts.get("ready", 0)), "boots", "boots that did not serve",
                ["boots"]),
        Derived("boots_oom_load", int(counts.get("oom_load", 0)), "boots", "boots out of memory at load", ["boots"]),
    ]
    bounds = bound_rows(pub)
    four = int(n("agents_4_streams"))
    agents = pub.table("agent_turns").set_index("streams")
    measured_four_ms = 1000 / float(agents.loc[four, "median_tok_s"])

    def bound(plan_host: int, batch: int, link: str) -> float:
        sel = bounds[(bounds["host_experts"] == plan_host) & (bounds["batch"] == batch) & (bounds["link"] == link)]
        return float(sel["tpot_lower_bound_ms"].iloc[0])

    raw, meas = list(predict.STUDY_LINK_GBPS)
    gen30, more = int(n("gen30_host_experts")), sorted(set(bounds["host_experts"]))[-1]
    host_mb = float(bounds[(bounds["host_experts"] == gen30) & (bounds["batch"] == 1)]
                    ["host_bytes_per_step_per_gpu"].iloc[0]) / 1e6
    f += [
        Derived("expert_mb", predict.STUDY_LAYOUT.expert_bytes / 1e6, "MB", "one routed expert at three bits (the "
                "fit layer's anchor shapes: not published)", ["exl3_expert_bits"]),
        Derived("host_mb_per_token", host_mb, "MB", "gen30: expected bytes a GPU reads from host per token, one "
                "stream, uniform routing", ["gen30_host_experts", "experts_active", "experts_per_layer", "tp"]),
        Derived("bound_gen30_raw_ms", bound(gen30, 1, raw), "ms", "TPOT lower bound of gen30 at one stream, raw "
                "Gen5 x16 link", ["gen30_host_experts", "tp"], compares="tpot_4k_ms",
                note="measured after a 4K prompt; the bound leaves out routing skew and speculative decoding"),
        Derived("bound_gen30_meas_ms", bound(gen30, 1, meas), "ms", "the same at the measured pinned H2D rate",
                ["gen30_host_experts", "tp"], compares="tpot_4k_ms"),
        Derived("bound_gen30_four_ms", bound(gen30, four, raw), "ms", "gen30's step bound at four streams, raw link",
                ["gen30_host_experts", "agents_4_streams"]),
        Derived("measured_four_ms", measured_four_ms, "ms", "1,000 / the published per-agent median at four agents",
                ["agent_turns", "agents_4_streams"]),
        Derived("measured_vs_bound", "at or below" if n("tpot_4k_ms") <= bound(gen30, 1, raw) * 1.01 else "above",
                "", "the published TPOT against gen30's bound at the raw link (within 1%: at)",
                ["tpot_4k_ms", "gen30_host_experts"]),
        Derived("bound_more_raw_ms", bound(more, 1, raw), "ms", "TPOT lower bound with half the experts on host, "
                "one stream, raw link", ["experts_per_layer", "moe_layers"]),
        Derived("bound_more_over_gen30", bound(more, 1, raw) / bound(gen30, 1, raw), "ratio",
                "that bound over gen30's", ["gen30_host_experts"]),
    ]
    for label, per_layer in (("expert", False), ("layer", True)):
        exact, rounded = pinned_gib(pub, per_layer)
        f += [Derived(f"host_gib_exact_{label}", exact, "GiB", f"gen30's experts in pinned host memory, exact "
                      f"({label} blocks)", ["gen30_host_experts", "tp"]),
              Derived(f"host_gib_pow2_{label}", rounded, "GiB", "the same with each block rounded up to a power of "
                      "two", ["gen30_host_experts", "tp"])]
    outcomes = pd.DataFrame({"outcome": counts.index, "boots": counts.values})
    return Derivation(f, {"boot_outcomes": outcomes, "bounds": bounds})


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: dict[str, Any]) -> dict[str, Any]:
    return run_reference(run, data_root, campaign, derive, params)
