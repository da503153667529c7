"""Claims of ``ref_hardware``: the prediction table of the study's pod, its errors, the factors, E9 and the rigs."""

from __future__ import annotations

import functools
from typing import Any

from offload_lab.core.runs import MANIFEST
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_pct, fmt_sig, table_value

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)
EXP = "ref_hardware"
FIGURES, E9, RIGS, FACTORS = "figures.csv", "e9.csv", "home_rigs.csv", "factors.json"

WORDS = {
    "agent_turns_1_median_tok_s": "Agent turns, 1 stream (tok/s)", "agent_turns_2_median_tok_s": "Agent turns, 2 streams",
    "agent_turns_3_median_tok_s": "Agent turns, 3 streams", "agent_turns_4_median_tok_s": "Agent turns, 4 streams",
    "agent_turns_6_median_tok_s": "Agent turns, 6 streams", "agent_turns_8_median_tok_s": "Agent turns, 8 streams",
    "tpot_4k_ms": "TPOT after 4K (ms)", "tpot_256k_ms": "TPOT after 256K (ms)", "ttft_128k_s": "TTFT, 128K fresh (s)",
    "ttft_260k_s": "TTFT, 260,000 fresh (s)", "cached_256k_4_users_ttft_p95_s": "Cached 256K, 4 users: TTFT p95 (s)",
    "cached_256k_4_users_tpot_ms": "Cached 256K, 4 users: TPOT (ms)", "kv_share_five_128k": "KV share, five 128K",
    "vllm_full_length_requests": "vLLM's full-length requests", "per_gpu_all_on_gpu_gib": "Per GPU, all on GPU (GiB)",
    "per_gpu_gen30_gib": "Per GPU, gen30 plan (GiB)",
}


@claim("ref_hardware.table", experiment=EXP, files=[FIGURES], kind="table")
def _table(src: Sources) -> dict[str, Any]:
    """Every published speed and capacity figure of the study's pod beside its prediction from hardware figures;
    the fitted ones say so."""
    rows = []
    for _, r in src.csv(FIGURES).iterrows():
        rows.append([WORDS.get(r["name"], r["name"]), str(r["measured_on"]), fmt_sig(3)(r["published"]),
                     fmt_sig(3)(r["predicted"]), "fitted" if bool(r["fitted"]) else f"×{float(r['ratio']):.2f}"])
    return table_value(["Figure", "Measured on", "Published", "Predicted", "Ratio"], rows, "llrrr")


def _summary(src: Sources) -> dict[str, Any]:
    return src.json(FACTORS)["summary"]


@claim("ref_hardware.predicted_count", experiment=EXP, files=[FACTORS], fmt=fmt_int, unit="figures")
def _count(src: Sources) -> int:
    """Published figures predicted, not fitted."""
    return int(_summary(src)["predicted_figures"])


@claim("ref_hardware.median_error", experiment=EXP, files=[FACTORS], fmt=fmt_pct(0), unit="fraction")
def _median(src: Sources) -> float:
    """Median absolute relative error of the predicted figures."""
    return float(_summary(src)["median_abs_error"])


@claim("ref_hardware.worst_factor", experiment=EXP, files=[FACTORS], fmt=fmt_sig(2), unit="ratio")
def _worst(src: Sources) -> float:
    """The largest factor between a predicted figure and its published value."""
    return float(_summary(src)["worst_factor"])


@claim("ref_hardware.skew", experiment=EXP, files=[FACTORS], fmt=fmt_sig(2), unit="Zipf exponent")
def _skew(src: Sources) -> float:
    """Fitted routing concentration (Zipf exponent of expert popularity in a layer)."""
    return float(src.json(FACTORS)["factors"]["routing_skew"])


@claim("ref_hardware.overhead_us", experiment=EXP, files=[FACTORS], fmt=fmt_int, unit="µs")
def _overhead(src: Sources) -> float:
    """Fitted fixed time per layer and decode step."""
    return float(src.json(FACTORS)["factors"]["layer_overhead_us"])


@claim("ref_hardware.compute_efficiency", experiment=EXP, files=[FACTORS], fmt=fmt_pct(0), unit="fraction")
def _eff(src: Sources) -> float:
    """Fitted share of the dense peak prefill reaches."""
    return float(src.json(FACTORS)["factors"]["compute_efficiency"])


@claim("ref_hardware.link_efficiency", experiment=EXP, files=[FACTORS], fmt=fmt_pct(0), unit="fraction")
def _link(src: Sources) -> float:
    """The link's measured share of its peak (not fitted)."""
    return float(src.json(FACTORS)["factors"]["link_efficiency"])


@claim("ref_hardware.e9_one", experiment=EXP, files=[E9], fmt=fmt_int, unit="tok/s")
def _e9_one(src: Sources) -> float:
    """E9 predicted: one agent stream's rate on two B300 with every weight in VRAM (no measurement)."""
    f = src.csv(E9)
    return float(f[f["streams"] == 1]["tok_s_per_stream"].iloc[0])


@claim("ref_hardware.e9_eight", experiment=EXP, files=[E9], fmt=fmt_int, unit="tok/s")
def _e9_eight(src: Sources) -> float:
    """E9 predicted: each of eight agent streams' rate."""
    f = src.csv(E9)
    return float(f[f["streams"] == 8]["tok_s_per_stream"].iloc[0])


@claim("ref_hardware.rigs", experiment=EXP, files=[RIGS], kind="table")
def _rigs(src: Sources) -> dict[str, Any]:
    """The community page's home rigs: measured decode speed beside this project's upper bound for each."""
    rows = [[str(r["build"]), fmt_sig(3)(r["measured_tok_s"]), fmt_sig(3)(r["upper_bound_tok_s"]),
             "yes" if bool(r["holds"]) else "no"] for _, r in src.csv(RIGS).iterrows()]
    return table_value(["Build", "Measured (tok/s)", "Upper bound (tok/s)", "Bound holds"], rows, "lrrl")


@claim("ref_hardware.rigs_hold", experiment=EXP, files=[RIGS], fmt=fmt_int, unit="rigs")
def _rigs_hold(src: Sources) -> int:
    """Home rigs whose measured speed is at or below the upper bound."""
    return int(src.csv(RIGS)["holds"].astype(bool).sum())


@claim("ref_hardware.rigs_count", experiment=EXP, files=[RIGS], fmt=fmt_int, unit="rigs")
def _rigs_count(src: Sources) -> int:
    """Home rigs on the community page."""
    return int(len(src.csv(RIGS)))


@claim("ref_hardware.free_factors", experiment=EXP, files=[FACTORS], fmt=fmt_int, unit="factors")
def _free(src: Sources) -> int:
    """Free factors fitted on published figures."""
    return int(sum(1 for v in src.json(FACTORS)["factor_sources"].values() if str(v).startswith("fitted")))


@claim("ref_hardware.within_factor", experiment=EXP, files=[MANIFEST], fmt=fmt_sig(2), unit="ratio")
def _within_factor(src: Sources) -> float:
    """The factor a prediction is held to (the experiment's parameter)."""
    return float(src.parameters["within_factor"])


@claim("ref_hardware.within_factor_count", experiment=EXP, files=[FIGURES, MANIFEST], fmt=fmt_int, unit="figures")
def _within_count(src: Sources) -> int:
    """Predicted figures within that factor of the published value."""
    k = float(src.parameters["within_factor"])
    f = src.csv(FIGURES)
    f = f[~f["fitted"].astype(bool)]
    return int(((f["ratio"] <= k) & (f["ratio"] >= 1 / k)).sum())
