"""Experiment ``ref_campaign``: the published campaign, its limits and the community's home rigs as data.

From the campaign's ``published`` run: the sessions' total time, the pod and API cost and what the pod cost an hour
of session, the stop rule's arithmetic on the episode it ended (one error in eight requests against a rule of 5%),
what the same time would have cost on the E9 baseline that was not run, the home rigs against the bar and against the
pod's single-stream rate, the memory math's weight sizes for each published bits-per-weight value at both
parameter counts, and the community page's memory-math table recomputed row by row on its own ladder (powers of two
of decimal GB), each printed row beside its recomputation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.core import runs
from offload_lab.published import transcription as published
from offload_lab.published.derive import Derivation, Derived, figure_list, run_reference
from offload_lab.fit import memory_math

EXPERIMENT = "ref_campaign"


def derive(pub: published.Published, params: dict[str, Any]) -> Derivation:
    n = pub.number
    minutes = [float(m) for m in figure_list(pub, "session_minutes")]
    hours = sum(minutes) / 60
    rate = n("stop_rule_errors") / n("stop_rule_requests")
    single = 1000 / n("tpot_4k_ms")
    f = [
        Derived("sessions", len(minutes), "sessions", "sessions listed", ["session_minutes"]),
        Derived("session_minutes_total", sum(minutes), "minutes", "sum of the sessions' minutes", ["session_minutes"]),
        Derived("session_hours_total", hours, "hours", "that sum over 60", ["session_minutes"]),
        Derived("pod_usd_per_session_hour", n("pod_cost_usd") / hours, "USD/hour", "pod cost over the sessions' hours",
                ["pod_cost_usd", "session_minutes"], note="the pod cost is published as about 14 USD"),
        Derived("total_usd", n("pod_cost_usd") + n("api_cost_usd"), "USD", "pod time plus API calls",
                ["pod_cost_usd", "api_cost_usd"]),
        Derived("api_share", n("api_cost_usd") / (n("pod_cost_usd") + n("api_cost_usd")), "fraction",
                "API calls' share of the total", ["pod_cost_usd", "api_cost_usd"]),
        Derived("stop_episode_rate", rate, "fraction", "errors over requests in the episode that ended a sweep",
                ["stop_rule_errors", "stop_rule_requests"]),
        Derived("stop_rule_fired", "yes" if rate > n("stop_rule_error_rate") else "no", "",
                "whether that rate exceeds the rule's", ["stop_rule_errors", "stop_rule_requests",
                                                         "stop_rule_error_rate"]),
        Derived("later_rule_min_rate", n("stop_rule_later_min_errors") / n("stop_rule_requests"), "fraction",
                "the later rule's least error rate in a sweep of eight", ["stop_rule_later_min_errors",
                                                                         "stop_rule_requests"]),
        Derived("e9_usd_same_hours", n("e9_usd_per_hour") * hours, "USD", "E9's price × the sessions' hours",
                ["e9_usd_per_hour", "session_minutes"]),
        Derived("e9_over_pod", n("e9_usd_per_hour") / (n("pod_cost_usd") / hours), "ratio",
                "E9's price over the pod's cost per session hour", ["e9_usd_per_hour", "pod_cost_usd",
                                                                    "session_minutes"]),
        Derived("pod_single_tok_s", single, "tokens/s", "1,000 / median TPOT at 4K (one stream on pod 2)",
                ["tpot_4k_ms"]),
    ]
    rigs = pub.table("home_rigs")
    rigs = rigs.assign(over_bar=rigs["tok_s"] / n("bar_tok_s_per_stream"), pod_over_rig=single / rigs["tok_s"])
    f += [Derived("rigs_above_bar", int((rigs["over_bar"] >= 1).sum()), "rigs", "home rigs at or above the bar",
                  ["home_rigs", "bar_tok_s_per_stream"]),
          Derived("rig_fastest_tok_s", float(rigs["tok_s"].max()), "tokens/s", "the fastest home rig", ["home_rigs"]),
          Derived("pod_over_fastest_rig", single / float(rigs["tok_s"].max()), "ratio",
                  "the pod's single stream over the fastest home rig", ["home_rigs", "tpot_4k_ms"])]
    names, bpw = figure_list(pub, "gguf_formats"), figure_list(pub, "gguf_bpw")
    mm = pd.DataFrame([{"format": name, "bits_per_weight": float(b),
                        "gb_at_total": n("params_total_b") * float(b) / 8,
                        "gb_at_community": n("params_community_b") * float(b) / 8}
                       for name, b in zip(names, bpw)])
    f += [Derived("mm_smallest_gb", float(mm["gb_at_community"].min()), "GB",
                  "smallest weight size on the page's rule, at the community count", ["gguf_bpw", "params_community_b"]),
          Derived("mm_largest_gb", float(mm["gb_at_community"].max()), "GB",
                  "largest weight size on the page's rule, at the community count", ["gguf_bpw",
                                                                                      "params_community_b"])]
    page, page_figs = page_memory_math(pub)
    return Derivation(f + page_figs, {"home_rigs": rigs, "memory_math": mm, "page_memory_math": page})


def page_memory_math(pub: published.Published) -> tuple[pd.DataFrame, list[Derived]]:
    """The community page's memory-math table recomputed (``offload-lab memory-math --ladder community-page`` at the
    page's count): each printed row beside its recomputation, weights and smallest memory, with the differences."""
    lad = memory_math.memory_math_inputs().ladder(memory_math.PAGE_LADDER)
    printed = pub.table(memory_math.PAGE_TABLE)
    params = pub.number(memory_math.PAGE_PARAMS_KEY) * 1e9
    rows = memory_math.memory_math(params, [str(x) for x in printed["format"] if str(x) in
                                            memory_math.memory_math_inputs().bits_per_weight], ladder=lad.name)
    page = [{k: (None if isinstance(v, float) and pd.isna(v) else v) for k, v in r.items()}
            for r in printed.to_dict("records")]
    table = pd.DataFrame(memory_math.beside_printed(rows, page, lad))
    gguf = table[table["bits_per_weight"].notna()]
    uses = [memory_math.PAGE_TABLE, memory_math.PAGE_PARAMS_KEY]
    worst = gguf.loc[gguf["weight_difference_gb"].abs().idxmax()]
    figs = [
        Derived("page_rows", int(len(table)), "rows", "rows of the page's memory-math table", uses),
        Derived("page_smallest_agree", int(table["smallest_memory_agrees"].sum()), "rows",
                "rows whose smallest common memory size, recomputed on the page's ladder, equals the printed one", uses),
        Derived("page_weight_max_diff_gb", float(worst["weight_difference_gb"]), "GB",
                "the largest difference, recomputed less printed weights, over the GGUF rows", uses),
        Derived("page_weight_max_diff_pct", float(worst["weight_difference_pct"]) / 100, "fraction",
                "the same as a share of the printed weight", uses),
        Derived("page_weight_max_diff_format", str(worst["format"]), "", "the format of that row", uses),
        Derived("page_weights_within", int(gguf["weight_within_tolerance"].sum()), "rows",
                f"GGUF rows whose weight is within {100 * memory_math.WEIGHT_TOLERANCE:g}% of the printed one", uses),
        Derived("page_gguf_rows", int(len(gguf)), "rows", "GGUF rows of the page's table", uses),
    ]
    if "cmm_native_gb" in pub.figures:
        figs.append(Derived("native_gb_from_official", pub.number("official_checkpoint_gib") * 2**30 / 1e9, "GB",
                            "the official checkpoint's published GiB in decimal GB", ["official_checkpoint_gib"],
                            compares="cmm_native_gb"))
    rigs = pub.table("community_rigs") if (pub.run_dir / "community_rigs.csv").is_file() else None
    if rigs is not None:
        both = rigs.dropna(subset=["gpus", "gpu_memory_gb", "host_memory_gb"])
        if len(both):
            r = both.iloc[0]
            total = float(r["gpus"]) * float(r["gpu_memory_gb"]) + float(r["host_memory_gb"])
            smallest = float(gguf["weight_gb"].min())
            figs += [Derived("rig_offload_gb", total, "GB", "GPU memory and system RAM together of the page's rig "
                             "that states both (its rule for offloaded runs: VRAM + system RAM ≥ weights)",
                             ["community_rigs"]),
                     Derived("rig_offload_build", str(r["build"]), "", "that rig", ["community_rigs"]),
                     Derived("rig_smallest_gguf_gb", smallest, "GB", "the smallest recomputed weight of the table",
                             uses),
                     Derived("rig_holds_smallest", "holds" if total >= smallest else "does not hold", "",
                             "whether that rig holds it by the page's rule", ["community_rigs", *uses])]
    return table, figs


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: dict[str, Any]) -> dict[str, Any]:
    return run_reference(run, data_root, campaign, derive, params)
