"""Figures of the published figures."""

from __future__ import annotations

import functools

from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)


@figure("published_agent_turns", experiment="published", files=["agent_turns.csv", "figures.json"])
def published_agent_turns(src: Sources, ax: Any) -> None:
    """The published agent-turn sweep: output tokens/s per agent (median and p5) against agents, with the bar."""
    t = src.csv("agent_turns.csv").sort_values("streams")
    figs = {f["key"]: f["value"] for f in src.json("figures.json")}
    ax.plot(t["streams"], t["median_tok_s"], marker="o", markersize=3.5, linewidth=1.4, color="#6a3d9a",
            label="median")
    ax.plot(t["streams"], t["p5_tok_s"], linestyle=":", linewidth=1.0, color="#6a3d9a", label="p5")
    bar = float(figs["bar_tok_s_per_stream"])  # the published bar: no stand-in when the transcription lacks it
    ax.axhline(bar, color="black", linestyle="--", linewidth=1.0, label="bar")
    margin = figs.get("provisioning_margin")
    if margin is not None:
        ax.axhline(bar * (1 + float(margin)), color="black", linestyle=":", linewidth=0.8, label="bar with margin")
    ax.set_xticks(list(t["streams"]))
    ax.set_xlabel("agents at once")
    ax.set_ylabel("output tok/s per agent")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False)


