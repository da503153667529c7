"""Figures of experiment ``ref_context``: the published long-context figures, drawn from its derived tables."""

from __future__ import annotations

import functools
from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)
HEADROOM = 1.2


@figure("ref_context_rates", experiment="ref_context", files=["tpot_points.csv", "prefill_points.csv"])
def ref_context_rates(src: Sources, ax: Any) -> None:
    """Published median TPOT after the short and the long prompt, and the prefill rate of the two fresh prompts."""
    t, p = src.csv("tpot_points.csv"), src.csv("prefill_points.csv")
    ax.plot(t["prompt_tokens"], t["tpot_ms"], marker="o", color="#1f4f8a", label="median TPOT (ms)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("median TPOT (ms)")
    # Headroom above the highest point on each axis: a marker drawn at the axes' edge is clipped.
    ax.set_ylim(0, HEADROOM * float(t["tpot_ms"].max()))
    right = ax.twinx()
    right.plot(p["prompt_tokens"], p["tok_s"] / 1000, marker="s", linestyle="--", color="#b15928",
               label="prefill (thousand tok/s)")
    right.set_ylabel("prefill, thousand tokens/s")
    right.set_ylim(0, HEADROOM * float((p["tok_s"] / 1000).max()))
    lines = ax.get_lines() + right.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], frameon=False, loc="lower left")
