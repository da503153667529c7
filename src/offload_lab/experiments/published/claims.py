"""Claims of the published figures, printed where the reference campaign measured nothing."""

from __future__ import annotations

import functools

from typing import Any


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
    """The published agent-turn table read with the same rule as a measured sweep (concurrency.sweep_verdict)."""
    from offload_lab.experiments.concurrency.runner import sweep_verdict

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


