"""Figures of the quality experiment."""

from __future__ import annotations

import functools

from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure
from offload_lab.quality import EXPERIMENT

from offload_lab.experiments.quality.claims import BENCHMARKS, CSV, LABELS

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)



@figure("quality_delta", experiment=EXPERIMENT, files=[CSV], size_in=(6.0, 2.4))
def quality_delta(src: Sources, ax: Any) -> None:
    """Difference in accuracy, local minus reference, per benchmark, with paired bootstrap and Newcombe intervals."""
    frame = src.csv(CSV).set_index("benchmark")
    names = [b for b in BENCHMARKS if b in frame.index]
    for y, b in enumerate(names):
        r = frame.loc[b]
        ax.plot([r["newcombe_low"], r["newcombe_high"]], [y, y], color="#9aa5b1", linewidth=1.2,
                label="Newcombe 95%" if y == 0 else None)
        ax.plot([r["ci_low"], r["ci_high"]], [y, y], color="#1f5f9e", linewidth=3.5, solid_capstyle="butt",
                label="paired bootstrap 95%" if y == 0 else None)
        ax.plot([r["delta"]], [y], marker="o", color="#0b2f52", markersize=5)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([LABELS[b] for b in names])
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("accuracy difference, local minus reference")
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize="small")


@figure("quality_flips", experiment=EXPERIMENT, files=[CSV], size_in=(6.0, 2.4))
def quality_flips(src: Sources, ax: Any) -> None:
    """Share of items whose outcome flips: between the sides, and within each side between its two replicates."""
    frame = src.csv(CSV).set_index("benchmark")
    names = [b for b in BENCHMARKS if b in frame.index]
    width = 0.26
    series = (("flip_fraction", "local vs reference", "#1f5f9e"),
              ("noise_flip_reference", "reference vs itself", "#9aa5b1"),
              ("noise_flip_local", "local vs itself", "#c9ced6"))
    for k, (col, label, color) in enumerate(series):
        values = [100 * float(frame.loc[b, col]) if col in frame.columns and frame.loc[b, col] == frame.loc[b, col]
                  else 0.0 for b in names]
        ax.bar([i + (k - 1) * width for i in range(len(names))], values, width, color=color, label=label)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([LABELS[b] for b in names])
    ax.set_ylabel("items flipped (%)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize="small")
