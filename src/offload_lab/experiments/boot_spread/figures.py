"""Figures of the repeated boots."""

from __future__ import annotations

import functools

from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)


@figure("boot_spread", experiment="boot_spread", files=["per_boot.csv"], size_in=(6.0, 2.7))
def boot_spread(src: Sources, ax: Any) -> None:
    """Median TPOT of each boot at each context length, with that boot's p5 to p95: the spread between boots beside
    the spread within one."""
    per = src.csv("per_boot.csv")
    per = per[per["metric"] == "tpot_ms"]
    groups = sorted(per["group"].unique())
    boots = sorted(per["boot"].unique())
    width = 0.8 / max(len(boots), 1)
    colors = ("#1f5f9e", "#b0461b", "#2e7d32", "#6a3d9a", "#7a7a7a")
    for j, b in enumerate(boots):
        sub = per[per["boot"] == b].set_index("group").reindex(groups)
        x = [i + (j - (len(boots) - 1) / 2) * width for i in range(len(groups))]
        ax.errorbar(x, sub["median"], yerr=[sub["median"] - sub["p5"], sub["p95"] - sub["median"]], fmt="o",
                    markersize=3.5, capsize=2.5, linewidth=1.0, color=colors[j % len(colors)],
                    label=f"boot {int(b) + 1}")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{int(g):,}" for g in groups])
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TPOT (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(boots))
