"""Experiment ``ref_model``: the published model, memory audit (E1) and boots (E2) as data, with what follows.

From the campaign's ``published`` run: the routed experts and the community page's parameters recounted from their
parts, the BF16 and one-byte Engram sizes recomputed from the parameter counts, the share of experts the gen30 plan
moves against the summary's "a third", how far the model overshoots a GPU and what the plan frees, and the boots'
outcomes counted; and what the plan predicts: the TPOT lower bound from the link and HBM bandwidths for gen30 and
for plans with more experts on host (:mod:`offload_lab.fit.predict`), beside the published TPOT, and the pinned host
memory gen30's experts need with and without the allocator's power-of-two rounding (:mod:`offload_lab.fit.host_ram`).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from offload_lab.core import paths, runs
from offload_lab.published import transcription as published
from offload_lab.published.derive import Derivation, Derived, run_reference
from offload_lab.fit import checkpoint, generators, host_ram, memory, predict, synthetic

EXPERIMENT = "ref_model"
GIB, GB = 2**30, 1e9
# What the gen30 plan moves to host besides its experts, as the fit layer's categories name them: "plus both Engram
# tables (int4) and the token embedding" (published figure gen30_host_tensors).
HOST_CATEGORIES = ("engram", "embedding")
# The study's checkpoint layout as the fit layer writes it (published counts, the anchor's shapes).
CHECKPOINT_SPEC = "configs/checkpoints/synthetic-dsv41-flash-exl3.yaml"


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


def study_model(spec_path: Path) -> tuple[Any, Any]:
    """The study's checkpoint layout as the fit layer reads it: a header-only synthetic checkpoint
    (``configs/checkpoints/*.yaml``: its counts are published, its shapes the anchor's) written to a temporary
    directory, read back and classified as ``offload-lab audit`` reads a real one."""
    return _study_model(str(spec_path), runs.sha256_file(spec_path))


@functools.lru_cache(maxsize=2)
def _study_model(spec_path: str, sha256: str) -> tuple[Any, Any]:
    # Keyed by content: writing and reading the headers takes seconds, and a notebook or a test derives more than once.
    spec = synthetic.load_spec(spec_path)
    with tempfile.TemporaryDirectory(prefix="offload-lab-ref-model-") as tmp:
        synthetic.write_checkpoint(spec, Path(tmp) / spec.name)
        ckpt = checkpoint.read_checkpoint(str(Path(tmp) / spec.name))
        return ckpt, checkpoint.classify(ckpt)


def plan_host_ram(pub: published.Published, spec_path: Path) -> pd.DataFrame:
    """Pinned host memory of the gen30 plan, for every host category it moves (its routed experts, spread evenly
    over the layers; the Engram tables at four bits; the token embedding), per category and in all, exact and with
    the caching host allocator's power-of-two rounding under each block granularity the fit layer implements
    (:func:`fit.host_ram.by_category`)."""
    n = pub.number
    ckpt, cls = study_model(spec_path)
    model = memory.MemoryModel(cls, memory.Parallelism(tp=int(n("tp"))), ckpt.config)
    mask = generators.gen_uniform(model, count=int(n("gen30_host_experts")))
    host = memory.HostSet(frozenset(model.experts.keys[int(i)] for i in np.flatnonzero(mask)),
                          frozenset(generators.host_tensors_for(cls, HOST_CATEGORIES)))
    rows = []
    for granularity in host_ram.GRANULARITIES:
        for category, r in host_ram.by_category(model, host, granularity).items():
            rows.append({"granularity": granularity, "category": category, **r})
    table = pd.DataFrame(rows)
    totals = table.groupby("granularity", as_index=False)[["blocks", "exact_gib", "rounded_gib"]].sum()
    return pd.concat([table, totals.assign(category="all")], ignore_index=True)


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
        # A bound, not a recomputation of the published TPOT: the two are set in their own columns (bound_table).
        Derived("bound_gen30_raw_ms", bound(gen30, 1, raw), "ms", "TPOT lower bound of gen30 at one stream, raw "
                "Gen5 x16 link", ["gen30_host_experts", "tp"],
                note="the published median after a 4K prompt is a measurement, set beside it in bound_table"),
        Derived("bound_gen30_meas_ms", bound(gen30, 1, meas), "ms", "the same at the measured pinned H2D rate",
                ["gen30_host_experts", "tp"]),
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
    measured = {1: (n("tpot_4k_ms"), "median TPOT after a 4K prompt (pod 2)"),
                four: (measured_four_ms, "1,000 / per-agent median, 4 agents (pod 3)")}
    table_rows = []
    for plan, label in ((gen30, "gen30"), (more, "half on host")):
        for batch in (1, four) if plan == gen30 else (1,):
            for link in (raw, meas) if plan == gen30 else (raw,):
                ms, words = measured.get(batch, (None, "")) if plan == gen30 else (None, "not measured")
                table_rows.append({"plan": label, "host_experts": plan, "streams": batch, "link": link,
                                   "link_gbps": predict.STUDY_LINK_GBPS[link], "bound_ms": bound(plan, batch, link),
                                   "published_ms": ms, "published_what": words})
    bound_table = pd.DataFrame(table_rows)
    ram = plan_host_ram(pub, paths.resolve_in_root(CHECKPOINT_SPEC))
    uses = ["gen30_host_experts", "gen30_host_tensors", "gen30_engram_bits", "tp"]

    def gib(category: str, column: str, granularity: str = "layer-tensor") -> float:
        sel = ram[(ram["category"] == category) & (ram["granularity"] == granularity)]
        return float(sel[column].iloc[0]) if len(sel) else 0.0

    for category, label in (("routed_expert", "experts"), ("engram", "Engram tables"), ("embedding", "embedding"),
                            ("all", "everything the plan moves")):
        key = "all" if category == "all" else category
        f.append(Derived(f"host_gib_exact_{key}", gib(category, "exact_gib"), "GiB",
                         f"gen30's {label} in pinned host memory, exact, every rank", uses))
    for granularity in host_ram.GRANULARITIES:
        key = granularity.replace("-", "_")
        f.append(Derived(f"host_gib_pow2_{key}", gib("all", "rounded_gib", granularity), "GiB",
                         f"everything gen30 moves, each {granularity} block rounded up to a power of two", uses))
        f.append(Derived(f"host_blocks_{key}", int(gib("all", "blocks", granularity)), "blocks",
                         f"pinned blocks of gen30 with {granularity} blocks, every rank", uses))
    outcomes = pd.DataFrame({"outcome": counts.index, "boots": counts.values})
    return Derivation(f, {"boot_outcomes": outcomes, "bounds": bounds, "host_ram": ram, "bound_table": bound_table})


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: dict[str, Any]) -> dict[str, Any]:
    return run_reference(run, data_root, campaign, derive, params)
