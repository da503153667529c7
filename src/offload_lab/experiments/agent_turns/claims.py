"""Claims of the agent-turns experiment."""

from __future__ import annotations

import functools

from typing import Any

import pandas as pd

from offload_lab.load.bar import bar_of
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (finite as _finite, fmt_int, fmt_list_words, fmt_pct,
                                       fmt_sig)
from offload_lab.core.runs import MANIFEST

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


# agent turns
# ====================================================================================================================

AGENT = "agent_turns"


def _agent(src: Sources) -> pd.DataFrame:
    t = src.csv("regimes.csv")
    t = t[t["regime"] == "agent_turns"].sort_values("streams").reset_index(drop=True)
    if t.empty:
        raise ValueError("regimes.csv has no agent_turns rows")
    return t


def _agent_verdict(src: Sources) -> dict[str, Any]:
    return src.json("verdicts.json")["agent_turns"]


for _key, _what, _fmt in (("initial_context_tokens", "Context each agent starts with", fmt_int),
                          ("turn_new_tokens", "New tokens each turn adds", fmt_int),
                          ("output_tokens", "Tokens of each reply", fmt_int),
                          ("turns", "Turns each agent takes at a level", fmt_int)):
    claim(f"agent.{_key}", experiment=AGENT, files=[MANIFEST], fmt=_fmt, unit="",
          description=_what)(lambda src, _k=_key: int(src.parameters[_k]))


@claim("agent.streams", experiment=AGENT, files=[MANIFEST], fmt=fmt_list_words, unit="streams")
def _agent_streams(src: Sources) -> list[str]:
    """Numbers of agents at once the sweep ran."""
    return [str(int(n)) for n in src.parameters["streams"]]


@claim("agent.tok_s.one", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="tokens/s")
def _agent_one(src: Sources) -> float:
    """Median output tokens/s per agent with one agent."""
    return float(_agent(src)["tok_s_median"].iloc[0])


@claim("agent.tok_s.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="tokens/s")
def _agent_most(src: Sources) -> float:
    """Median output tokens/s per agent at the most agents measured."""
    return float(_agent(src)["tok_s_median"].iloc[-1])


@claim("agent.p5.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="tokens/s")
def _agent_p5(src: Sources) -> float:
    """p5 of output tokens/s per agent at the most agents measured."""
    return float(_agent(src)["tok_s_p5"].iloc[-1])


@claim("agent.streams.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_int, unit="streams")
def _agent_max(src: Sources) -> int:
    """The most agents at once measured."""
    return int(_agent(src)["streams"].iloc[-1])


@claim("agent.total_tok_s.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_int, unit="tokens/s")
def _agent_total(src: Sources) -> float:
    """Output tokens/s of all agents together at the most agents: per-agent median times agents in flight."""
    r = _agent(src).iloc[-1]
    conc = float(r["achieved_concurrency"]) if _finite(r.get("achieved_concurrency")) else float(r["streams"])
    return float(r["tok_s_median"]) * conc


@claim("agent.falloff", experiment=AGENT, files=["regimes.csv"], fmt=fmt_pct(0), unit="fraction")
def _agent_falloff(src: Sources) -> float:
    """How much the per-agent median falls from one agent to the most agents."""
    t = _agent(src)
    return 1 - float(t["tok_s_median"].iloc[-1]) / float(t["tok_s_median"].iloc[0])


@claim("agent.held_phrase", experiment=AGENT, files=["verdicts.json", "regimes.csv", MANIFEST], fmt="{}",
       unit="")
def _agent_held(src: Sources) -> str:
    """Up to how many agents the bar held, in words."""
    v = _agent_verdict(src)
    bar = bar_of(src.parameters)
    most = int(_agent(src)["streams"].max())
    if v.get("first_level_below_bar") is None:
        return f"held the bar of {bar:g} tokens/s at every level measured, up to {most} agents"
    if int(v["held_bar_up_to_streams"]) == 0:
        return f"missed the bar of {bar:g} tokens/s even with one agent"
    return (f"held the bar of {bar:g} tokens/s up to {int(v['held_bar_up_to_streams'])} agents and lost it at "
            f"{int(v['first_level_below_bar'])}")


@claim("agent.provisioning", experiment=AGENT, files=["verdicts.json"], fmt=fmt_int, unit="streams")
def _agent_prov(src: Sources) -> int:
    """Agents a pod is provisioned for: the most whose median clears the bar with the margin, at every level."""
    return int(_agent_verdict(src)["provisioning_streams"])


@claim("agent.ttft.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="s")
def _agent_ttft(src: Sources) -> float:
    """Median TTFT of a turn at the most agents (the context cached, the turn's new tokens prefilled)."""
    return float(_agent(src)["ttft_median_s"].iloc[-1])


@claim("agent.ttft.one", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="s")
def _agent_ttft1(src: Sources) -> float:
    """Median TTFT of a turn with one agent."""
    return float(_agent(src)["ttft_median_s"].iloc[0])


# ====================================================================================================================
