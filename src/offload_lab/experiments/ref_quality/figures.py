"""Figures of experiment ``ref_quality``: published intervals beside those recomputed from consistent counts."""

from __future__ import annotations

import functools
from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)


@figure("ref_quality_intervals", experiment="ref_quality", files=["derived.json"])
def ref_quality_intervals(src: Sources, ax: Any) -> None:
    """Difference in accuracy with its interval: published, and recomputed (bootstrap, Newcombe) from the counts."""
    rows = {f["key"]: f for f in src.json("derived.json")["figures"]}
    benches = [b for b in ("gsm8k", "ifeval", "humaneval") if f"{b}_boot_low" in rows]
    styles = (("published", "#6a3d9a", -0.2), ("bootstrap", "#1f4f8a", 0.0), ("newcombe", "#b15928", 0.2))
    labelled: set[str] = set()
    for i, b in enumerate(benches):
        d = rows[f"{b}_delta"]
        spans = {"bootstrap": (rows[f"{b}_boot_low"]["value"], rows[f"{b}_boot_high"]["value"], d["value"]),
                 "newcombe": (rows[f"{b}_newcombe_low"]["value"], rows[f"{b}_newcombe_high"]["value"], d["value"])}
        if rows[f"{b}_boot_low"]["published"] is not None:
            spans["published"] = (rows[f"{b}_boot_low"]["published"], rows[f"{b}_boot_high"]["published"],
                                  d["published"])
        for name, color, dy in styles:
            if name in spans:
                lo, hi, mid = spans[name]
                ax.plot([lo, hi], [i + dy, i + dy], color=color, linewidth=2.2,
                        label=None if name in labelled else name)
                labelled.add(name)
                ax.plot([mid], [i + dy], marker="o", markersize=3.5, color=color)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(benches)), [b.replace("gsm8k", "GSM8K").replace("ifeval", "IFEval")
                                        .replace("humaneval", "HumanEval") for b in benches])
    ax.set_xlabel("difference in accuracy, local minus API")
    ax.invert_yaxis()
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, frameon=False, loc="lower right")
