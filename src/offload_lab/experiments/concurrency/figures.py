"""Figures of the concurrency experiment: tokens per second per stream against streams, every regime."""

from __future__ import annotations

import functools

from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)


_REGIME_COLORS = {"short": "#1b5e9e", "cold_prefill": "#7a7a7a", "shared_prefix": "#b0461b",
                  "private_context": "#2e7d32", "agent_turns": "#6a3d9a"}


def _streams_axis(src: Sources, ax: Any) -> None:
    """Median output tok/s per stream against streams, one line per regime, p5 dashed, the bar drawn."""
    t = src.csv("regimes.csv")
    for regime, g in t.groupby("regime", sort=False):
        g = g.sort_values("streams")
        color = _REGIME_COLORS.get(str(regime), None)
        ax.plot(g["streams"], g["tok_s_median"], marker="o", markersize=3.5, linewidth=1.4, color=color,
                label=str(regime).replace("_", " "))
        ax.plot(g["streams"], g["tok_s_p5"], linestyle=":", linewidth=1.0, color=color)
    bar = float(src.parameters.get("bar_tok_s", 40.0))
    ax.axhline(bar, color="black", linestyle="--", linewidth=1.0, label="bar")
    ax.plot([], [], linestyle=":", color="grey", label="p5 (dotted)")
    ax.set_xticks(sorted(t["streams"].unique()))
    ax.set_xlabel("streams")
    ax.set_ylabel("output tok/s per stream")
    ax.set_ylim(bottom=0)
    # One row while the labels are few and short; a pod campaign's five named regimes would run past the edge.
    labels = ax.get_legend_handles_labels()[1]
    ncol = 5 if len(labels) <= 5 and sum(map(len, labels)) <= 60 else 3
    ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=ncol)


@figure("concurrency_tok_s", experiment="concurrency", files=["regimes.csv", "manifest.json"], size_in=(6.0, 3.0))
def concurrency_tok_s(src: Sources, ax: Any) -> None:
    """Output tokens per second per stream against streams, for every regime, with the bar."""
    _streams_axis(src, ax)


