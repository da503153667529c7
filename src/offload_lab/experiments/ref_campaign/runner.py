"""Experiment ``ref_campaign``: the published campaign, its limits and the community's home rigs as data.

From the campaign's ``published`` run: the sessions' total time, the pod and API cost and what the pod cost an hour
of session, the stop rule's arithmetic on the episode it ended (one error in eight requests against a rule of 5%),
what the same time would have cost on the E9 baseline that was not run, the home rigs against the bar and against the
pod's single-stream rate, and the memory math's weight sizes for each published bits-per-weight value at both
parameter counts (the page's "smallest common memory size" needs its ladder of sizes, which is not published).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.core import runs
from offload_lab.experiments.published import runner as published
from offload_lab.experiments.published.derive import Derivation, Derived, figure_list, run_reference

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
    return Derivation(f, {"home_rigs": rigs, "memory_math": mm})


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: dict[str, Any]) -> dict[str, Any]:
    return run_reference(run, data_root, campaign, derive, params)
