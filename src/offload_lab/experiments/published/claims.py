"""Claims of the published figures, printed where the reference campaign measured nothing."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any


from offload_lab.load.sweep import sweep_verdict
from offload_lab.core import paths
from offload_lab.paper.sections import fragments
from offload_lab.published.comparisons import cost_comparisons, seat_comparisons
from offload_lab.published.refclaims import CITES, declare_published, fmt_published
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (fmt_int, fmt_pct,
                                       table_value)

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


# published: the reference campaign's transcribed figures, where the paper has no measurement to print
# ====================================================================================================================

PUB = "published"


def published_figure(src: Sources, key: str) -> Any:
    for f in src.json("figures.json"):
        if f["key"] == key:
            return f["value"]
    raise ValueError(f"figures.json has no published figure {key!r}")


def published_agent_verdict(src: Sources) -> dict[str, Any]:
    """The published agent-turn table read with the same rule as a measured sweep (load.sweep.sweep_verdict)."""
    t = src.csv("agent_turns.csv")
    levels = t.rename(columns={"median_tok_s": "tok_s_median", "p5_tok_s": "tok_s_p5"})
    bar = float(published_figure(src, "bar_tok_s_per_stream"))
    levels["holds_bar"] = levels["tok_s_median"] >= bar
    return sweep_verdict(levels, bar, float(published_figure(src, "provisioning_margin")))


PUB_AGENT = ["agent_turns.csv", "figures.json"]

for _key, _what, _fmt in (
    ("agent_context_tokens", "Published: context each agent starts with", fmt_int),
    ("agent_context_growth_tokens", "Published: new tokens a turn adds", fmt_int),
    ("agent_reply_tokens", "Published: tokens of each reply", fmt_int),
    ("bar_tok_s_per_stream", "Published: the bar, output tokens/s per stream", fmt_int),
    ("provisioning_streams", "Published: streams a pod is provisioned for", fmt_int),
    ("provisioning_margin", "Published: the provisioning margin", fmt_pct(0)),
    ("agents_4_total_tok_s", "Published: output tokens/s of four agents together", fmt_int),
    ("agents_4_streams", "Published: agents behind that total", fmt_int),
    ("prefill_prompt_tokens", "Published: prompt of the longest fresh-prefill measurement", fmt_int),
    ("prefill_ttft_s", "Published: its time to first token", "{:g}"),
):
    claim(f"published.{_key}", experiment=PUB, files=["figures.json"], fmt=_fmt, unit="", description=_what)(
        lambda src, _k=_key: published_figure(src, _k))
    CITES.setdefault(_key, []).append(f"published.{_key}")


@claim("published.prefill_tok_s", experiment=PUB, files=["figures.json"], fmt=fmt_int, unit="tokens/s")
def _pub_prefill(src: Sources) -> float:
    """Prefill rate the published fresh prompt implies: its tokens over its TTFT (computed here)."""
    return float(published_figure(src, "prefill_prompt_tokens")) / float(published_figure(src, "prefill_ttft_s"))


@claim("published.agent.held_up_to", experiment=PUB, files=PUB_AGENT, fmt=fmt_int, unit="streams")
def _pub_held(src: Sources) -> int:
    """Agents up to which the published medians hold the bar (computed here from the published table)."""
    return int(published_agent_verdict(src)["held_bar_up_to_streams"])


@claim("published.agent.first_below", experiment=PUB, files=PUB_AGENT, fmt=fmt_int, unit="streams")
def _pub_first_below(src: Sources) -> int:
    """The first published level whose median is below the bar."""
    v = published_agent_verdict(src)["first_level_below_bar"]
    if v is None:
        raise ValueError("every published level holds the bar")
    return int(v)


@claim("published.agent.provisioning", experiment=PUB, files=PUB_AGENT, fmt=fmt_int, unit="streams")
def _pub_prov(src: Sources) -> int:
    """Agents the published table supports with the published margin (computed here, to check the published 4)."""
    return int(published_agent_verdict(src)["provisioning_streams"])


@claim("published.agent.tok_s.one", experiment=PUB, files=["agent_turns.csv"], fmt=fmt_int, unit="tokens/s")
def _pub_one(src: Sources) -> float:
    """Published median tokens/s per agent with one agent."""
    return float(src.csv("agent_turns.csv").sort_values("streams")["median_tok_s"].iloc[0])


@claim("published.agent.tok_s.most", experiment=PUB, files=["agent_turns.csv"], fmt=fmt_int, unit="tokens/s")
def _pub_most(src: Sources) -> float:
    """Published median tokens/s per agent at the most agents."""
    return float(src.csv("agent_turns.csv").sort_values("streams")["median_tok_s"].iloc[-1])


@claim("published.agent.streams.most", experiment=PUB, files=["agent_turns.csv"], fmt=fmt_int, unit="streams")
def _pub_most_n(src: Sources) -> int:
    """The most agents in the published table."""
    return int(src.csv("agent_turns.csv")["streams"].max())


@claim("published.agent.total_check", experiment=PUB, files=PUB_AGENT, fmt=fmt_int, unit="tokens/s")
def _pub_total(src: Sources) -> float:
    """The published per-agent median at four agents times four: a check on the published total."""
    t = src.csv("agent_turns.csv").set_index("streams")
    n = int(published_figure(src, "agents_4_streams"))
    return float(t.loc[n, "median_tok_s"]) * n


@claim("published.agent.table", experiment=PUB, files=PUB_AGENT, kind="table")
def _pub_table(src: Sources) -> dict[str, Any]:
    """The published agent-turn table, with whether each level holds the bar (computed here)."""
    t = src.csv("agent_turns.csv").sort_values("streams")
    bar = float(published_figure(src, "bar_tok_s_per_stream"))
    margin = float(published_figure(src, "provisioning_margin"))
    rows = [[str(int(r["streams"])), f"{r['median_tok_s']:g}", f"{r['p5_tok_s']:g}",
             "yes" if r["median_tok_s"] >= bar * (1 + margin) else ("yes, without the margin"
                                                                    if r["median_tok_s"] >= bar else "no")]
            for _, r in t.iterrows()]
    return table_value(["Agents", "Median tok/s", "p5 tok/s", "Holds the bar"], rows, "rrrl")



@claim("published.agent.total_vs", experiment=PUB, files=PUB_AGENT, fmt="{}", unit="")
def _pub_total_vs(src: Sources) -> str:
    """How the per-agent median times the agents compares with the published total, in words."""
    t = src.csv("agent_turns.csv").set_index("streams")
    n = int(published_figure(src, "agents_4_streams"))
    product, total = float(t.loc[n, "median_tok_s"]) * n, float(published_figure(src, "agents_4_total_tok_s"))
    if abs(product - total) <= 0.05 * total:
        return "matches"
    return "exceeds" if product > total else "falls short of"




# Every published figure the sections print as it is: pub.<key> (table-driven; refclaims.declare_published).
# ====================================================================================================================
from offload_lab.paper.formats import fmt_list_words, words  # noqa: E402

_G = "{:g}"
_1 = "{:,.1f}"
_WORDS = lambda v: fmt_list_words(str(x) for x in v)  # noqa: E731
declare_published(SECTION, (
    ("model_name", "{}"), ("pod_gpus", fmt_int), ("gpu_name", "{}"), ("gpu_memory_gb", fmt_int),
    ("host_share_words", "{}"), ("pods", fmt_int), ("params_total_b", _1), ("params_study_b", fmt_int),
    ("params_community_b", _1), ("params_active_b", _G), ("quality_ci_level", fmt_pct(0)),
    ("moe_layers", fmt_int), ("experts_per_layer", fmt_int), ("routed_experts", fmt_int), ("experts_active", fmt_int),
    ("bf16_gb", _1), ("official_checkpoint_gib", _1), ("exl3_pack_gib", _1), ("exl3_expert_bits", fmt_int),
    ("engram_tables", fmt_int), ("engram_params_b", _1), ("engram_gib_1byte", fmt_int),
    ("per_gpu_all_on_gpu_gib", _1), ("tp", fmt_int), ("usable_gib", _1), ("gen30_host_experts", fmt_int),
    ("gen30_host_tensors", _WORDS), ("gen30_engram_bits", fmt_int), ("per_gpu_gen30_gib", _1),
    ("uva_kv_block_fail", fmt_int), ("uva_kv_block_dies", fmt_int),
    ("tpot_4k_ms", _G), ("tpot_256k_ms", _G), ("ttft_128k_s", "{:.2f}"), ("tpot_4k_prompt_k", fmt_int),
    ("tpot_256k_prompt_k", fmt_int), ("ttft_128k_prompt_k", fmt_int), ("shared_256k_users", fmt_int),
    ("shared_256k_ttft_p95_s", "{:.2f}"), ("shared_256k_tpot_ms", _G), ("bar_ms_per_token", fmt_int),
    ("regimes", fmt_int), ("regime_context_k", _WORDS), ("bar_kept_streams", fmt_int),
    ("bar_lost_between", lambda v: f"{int(v[0])} and {int(v[1])}"), ("private_256k_max_streams", fmt_int),
    ("private_128k_streams", fmt_int), ("private_128k_kv_max", fmt_pct(0)), ("vllm_full_length_requests", "{:.2f}"),
    ("more_host_experts_effect", "{}"), ("topology_tpot_ratio", lambda v: f"{v[0]:.2f} to {v[1]:.2f}"),
    ("topology_pod1", "{}"), ("topology_pod2", "{}"), ("quality_flip_ifeval", fmt_pct(1)),
    ("quality_flip_humaneval", fmt_pct(1)), ("humaneval_invalid_api_score", _G),
    ("humaneval_invalid_local_score", "{:.3f}"), ("quality_thinking", "{}"),
    ("week_tokens_m", _1), ("week_sessions", fmt_int), ("week_active_days", fmt_int), ("reread_per_output_token", fmt_int),
    ("week_hours_generating", _G), ("week_fraction_generating", fmt_pct(1)), ("week_decode_tok_s", fmt_int),
    ("week_window_hours", fmt_int), ("week_q", fmt_pct(1)),
    ("session_minutes", lambda v: fmt_list_words(f"{int(x)}" for x in v)), ("pod_cost_usd", _G),
    # In cents, as published ("12 cents").
    ("api_cost_usd", lambda v: f"{round(100 * float(v)):d}"), ("stop_rule_error_rate", fmt_pct(0)),
    ("stop_rule_requests", fmt_int),
    ("stop_rule_errors", fmt_int), ("stop_rule_later_min_errors", fmt_int), ("e9_gpus", fmt_int),
    ("e9_usd_per_hour", "{:.2f}"), ("slowdown_causes", _WORDS), ("limit_quality_subsets", fmt_int),
))
# The study's derived figures, the blog's and the statements the summary leaves out (configs/published/derived.yaml),
# and the community page's (community-memory-math.yaml): printed as the source printed them.
declare_published(SECTION, (
    ("volume_devs_full", fmt_int), ("volume_devs_half", fmt_int), ("seats_alpha_1pct", fmt_int),
    ("seats_alpha_5pct", fmt_int), ("blog_overlap_devs", fmt_int),
    ("blog_overlap_streams", lambda v: "zero one two three four five six seven eight nine ten".split()[int(v)]),
    ("pod_eur_per_month", fmt_int), ("subscriptions_per_pod", "{:.1f}"), ("subscriptions_per_pod_blog", fmt_int),
    ("team_20_devs", fmt_int), ("team_20_pods", fmt_int), ("team_20_extra_eur", fmt_int),
    ("team_100_pods", fmt_int), ("team_100_saving", fmt_pct(0)), ("team_250_pods", fmt_int),
    ("team_250_saving", fmt_pct(0)), ("gsm8k_same_items", fmt_int), ("gsm8k_same_questions", "{}"),
    ("context_ratio_long_short", fmt_int), ("context_slower_writing", fmt_pct(0)),
    ("six_streams_margin_tok_s", fmt_int),
    ("six_streams", lambda v: "zero one two three four five six seven eight nine ten".split()[int(v)].capitalize()), ("long_regimes_no_slower", "{}"),
    ("paper_pages", fmt_int),
    ("livebench_rank", lambda v: ("first" if int(v[0]) == 1 else f"number {int(v[0])}") + f" of {int(v[1])}"),
    ("cmm_params_b", _1), ("cmm_native_gb", fmt_int), ("cmm_ladder_rule", "{}"), ("cmm_offload_rule", "{}"),
    ("cmm_weights_warning", "{}"),
    ("topology_pcie_gen", fmt_int), ("topology_pcie_lanes", fmt_int), ("topology_same", _WORDS),
    ("topology_differ", _WORDS), ("rtx5090_gb", fmt_int),
    ("central_result", lambda v: f"{int(v[0])} by volume. {int(v[1])} by concurrency."),
))


@claim("pub.source_checked", experiment=PUB, files=["provenance.json"], fmt="{}", unit="")
def _pub_source_checked(src: Sources) -> str:
    """Whether the run that transcribed the figures checked them against the published summary ("yes": the summary
    was on its machine with the sha256 the transcription records) or could not ("no": it was not there)."""
    return "yes" if src.json("provenance.json").get("source_checked") is True else "no"


@claim("pub.boots.table", experiment=PUB, files=["boots.csv"], kind="table")
def _pub_boots(src: Sources) -> dict[str, Any]:
    """The published boots, each with offload-lab's name for its outcome."""
    t = src.csv("boots.csv")
    return table_value(["Boot", "Published outcome", "Outcome"],
                       [[r["boot"], r["outcome_words"], str(r["outcome"]).replace("_", " ")] for _, r in t.iterrows()],
                       "lll")


@claim("pub.home_rigs.table", experiment=PUB, files=["home_rigs.csv"], kind="table")
def _pub_rigs(src: Sources) -> dict[str, Any]:
    """The community page's home rigs and their measured decode speeds."""
    t = src.csv("home_rigs.csv")
    return table_value(["Build", "Engine", "tok/s"], [[r["build"], r["engine"], f"{r['tok_s']:g}"]
                                                       for _, r in t.iterrows()], "llr")


REF_DERIVED = [f"{e}:derived.json" for e in ("ref_model", "ref_context", "ref_regimes", "ref_topology", "ref_quality",
                                               "ref_campaign")]
STUDY_FILES = ["capacity:volume.csv", "capacity:seats.csv", "capacity:inputs.json", "capacity:profile.json",
               "cost:cost.json", "cost:costed_teams.csv"]
_CLAIM_RE = re.compile(r"\{\{<\s*claim\s+(\S+)\s*>\}\}")
# Prose this campaign does not print: the seat section's blocks for measured inputs (the reference campaign's inputs
# are published).
_MEASURED_SPAN = re.compile(r'\[[^\[\]]*\]\{\.when claim="capacity\.source" equals="measured"\}')
_MEASURED_OPEN = '::: {.when claim="capacity.source" equals="measured"}'


def _drop_measured(body: str) -> str:
    out, depth = [], 0
    for line in _MEASURED_SPAN.sub("", body).splitlines():
        if depth == 0 and line.strip() == _MEASURED_OPEN:
            depth = 1
            continue
        if depth:
            if line.startswith(":::") and line.strip() != ":::":
                depth += 1
            elif line.strip() == ":::":
                depth -= 1
            continue
        out.append(line)
    return "\n".join(out)


def printed_claims(campaign_dir: Path) -> set[str]:
    """The claims this campaign's paper prints: those in the prose of every section whose experiments it ran (and
    the paper's own blocks), leaving out what it drops for published inputs."""
    present = {p.name for p in campaign_dir.iterdir() if p.is_dir() and any(p.iterdir())}
    root = paths.find_root()
    names: set[str] = set()
    for f in fragments(root):
        if f.experiments and not set(f.experiments) <= present:
            continue
        names |= set(_CLAIM_RE.findall(_drop_measured(f.body)))
    names |= set(_CLAIM_RE.findall((root / "paper" / "paper.qmd").read_text(encoding="utf-8")))
    return names


def _recomputed(src: Sources, figures: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each published figure's recomputation as this paper prints it: a ref_* derived figure that compares with it,
    or the seat and cost comparisons."""
    out: dict[str, str] = {}
    for name in REF_DERIVED:
        if not src.has(name):
            continue
        for d in src.json(name)["figures"]:
            key, v = d.get("compares"), d.get("value")
            if key in figures and key not in out and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[key] = _like(v, figures[key])
    for key, (name, derived) in ALSO_RECOMPUTED.items():
        if key in figures and key not in out and src.has(name):
            v = next((d["value"] for d in src.json(name)["figures"] if d["key"] == derived), None)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[key] = _like(v, figures[key])
    if all(src.has(f) for f in STUDY_FILES):
        rows = (seat_comparisons(figures, src.csv("capacity:volume.csv"), src.csv("capacity:seats.csv"))
                + cost_comparisons(figures, src.json("cost:cost.json"), src.csv("cost:costed_teams.csv")))
        for c in rows:
            out.setdefault(c.key, c.fmt(c.recomputed) + (" (by construction)" if c.by_construction else ""))
        by = {c.key: c for c in rows}
        if "volume_devs_full" in by and "seats_alpha_1pct" in by:
            out.setdefault("central_result", f"{fmt_int(by['volume_devs_full'].recomputed)} and "
                                             f"{fmt_int(by['seats_alpha_1pct'].recomputed)}")
            out.setdefault("blog_overlap_devs", fmt_int(by["seats_alpha_1pct"].recomputed))
        inputs = src.json("capacity:inputs.json")
        if inputs.get("joint"):
            out.setdefault("week_split_rate", f"{fmt_int(inputs['joint']['prefill_tok_s'])} (inferred)")
        timing = src.json("capacity:profile.json")["computed"]
        for key, field, fmt in (("week_hours_generating", "hours_generating", lambda v: f"{v:.2f}"),
                                ("week_fraction_generating", "fraction_of_period", fmt_pct(1)),
                                ("week_q", "q", fmt_pct(1))):
            if key in figures:
                out.setdefault(key, fmt(float(timing[field])))
    return out


# Published figures a ref_* derived figure recomputes besides the one it is compared with: (file, derived key).
ALSO_RECOMPUTED = {
    "cmm_params_b": ("ref_model:derived.json", "params_community_b"),
    "gsm8k_same_items": ("ref_quality:derived.json", "gsm8k_n"),
    "six_streams_margin_tok_s": ("ref_regimes:derived.json", "margin_at_held"),
}


def _like(v: float, fig: dict[str, Any]) -> str:
    """A recomputed value with the published one's decimals, or one more where it is not whole."""
    printed = fig.get("as_published") or f"{fig['value']:g}"
    if printed.endswith("%"):
        return f"{100 * v:.{max(1, len(printed.rstrip('%').partition('.')[2]))}f}%"
    decimals = len(printed.partition(".")[2])
    if float(v).is_integer() and decimals == 0:
        return fmt_int(v)
    return f"{v:,.{max(decimals, 1)}f}"


def _unit(unit: str, value: Any) -> str:
    # "1 errors" reads wrong: a count of one takes the singular of a plain plural unit.
    if value == 1 and re.fullmatch(r"[a-z]+s", unit or ""):
        return unit[:-1]
    return unit if len(unit or "") <= 24 else ""


def _words(f: dict[str, Any]) -> str:
    """The source's words for a figure, whole (its first quoted part: a table row's label or the sentence), or nothing
    when its words are the transcription's summary (``words: transcription``): those are never the source's words."""
    if f.get("words", "source") != "source":
        return ""
    return f["published"].split(" | ")[0].strip().strip('"')


def _by(f: dict[str, Any]) -> str:
    by = f.get("by") or "the study"
    return by + (" (in the transcription's words)" if f.get("words", "source") != "source" else "")


@claim("pub.all_figures", experiment=PUB, files=["figures.json", *REF_DERIVED, *STUDY_FILES], kind="table")
def _pub_all(src: Sources) -> dict[str, Any]:
    """Every published figure of the transcriptions: the source's words, its section, the value as printed, this
    project's recomputation where there is one, and the claims of this paper that print it."""
    figures = {f["key"]: f for f in src.json("figures.json")}
    recomputed = _recomputed(src, figures)
    printed = printed_claims(src.run_dir.parent.parent)
    rows = []
    for f in figures.values():
        shown = f.get("as_published") or fmt_published(f["value"])
        if f.get("qualifier") in ("about", "at_most"):
            shown = f"{f['qualifier'].replace('_', ' ')} {shown}"
        if len(shown) > 48:  # a list in words: the summary holds it in full; the table keeps its rows short
            shown = shown[:46].rstrip(" ,") + "…"
        cited = ", ".join(sorted(c for c in CITES.get(f["key"], []) if c in printed)) or "this table only"
        rows.append([_words(f), _by(f), f["section"].split(" (")[0],
                     # "12 cents" carries its unit as printed
                     shown if re.search(r"[a-z]", f.get("as_published") or "") else
                     f"{shown} {_unit(f['unit'], f['value'])}".strip(), recomputed.get(f["key"], ""), cited])
    return table_value(["Published words", "Published by", "Section", "Published", "Recomputed", "Printed by"], rows,
                       "llllrl")
