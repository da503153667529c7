"""Figures of the audit experiment: what each GPU holds under each plan, and the plans' host traffic."""

from __future__ import annotations

import functools

from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure
from offload_lab.core.runs import MANIFEST

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)


@figure("audit_fit", experiment="audit", files=["fit.csv", MANIFEST], size_in=(6.0, 2.2))
def audit_fit(src: Sources, ax: Any) -> None:
    """What each GPU must hold of the study-scale layout, with no plan and with each plan, against its usable
    memory."""
    f = src.csv("fit.csv")
    f = f[(f["checkpoint"] == "synthetic") & (f["ep"].astype(str) == "False")].reset_index(drop=True)
    labels = {"none": "every weight on the GPUs"}
    names = [labels.get(p, str(p).split("+")[0] + " plan") for p in f["plan"]]
    colors = ["#b0461b" if not bool(x) else "#1f5f9e" for x in f["fits"]]
    y = list(range(len(f)))
    ax.barh(y, f["per_gpu_gib"], color=colors, height=0.55, label="on each GPU")
    ax.barh(y, f["host_gib_per_gpu"], left=f["per_gpu_gib"], color="#c9ced6", height=0.55,
            label="in pinned host memory")
    usable = float(f["usable_gib"].dropna().iloc[0])
    ax.axvline(usable, color="black", linestyle="--", linewidth=1.0, label="usable per GPU")
    reserve = float(src.parameters.get("reserve_gib", 0.0))
    if reserve > 0:
        ax.axvline(usable - reserve, color="black", linestyle=":", linewidth=0.9, label="usable less the reserve")
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlabel("GiB per GPU")
    ax.set_xlim(left=0)
    # A figure legend "outside" the axes: the constrained layout makes room for it, so it is never clipped (a legend
    # anchored above the axes' centre ran past the right edge, the axes being shifted by the long tick labels).
    ax.figure.legend(frameon=False, loc="outside upper center", ncol=2, fontsize=7)


@figure("plan_traffic", experiment="audit", files=["generators.csv"], size_in=(6.0, 2.6))
def plan_traffic(src: Sources, ax: Any) -> None:
    """Share of routed-expert traffic served from host memory, for each plan on the tiny model, on the text it was
    planned on, on held-out text of the same kind and on shifted text."""
    g = src.csv("generators.csv")
    width = 0.26
    sets = (("calibration", "planned on", "#1f5f9e"), ("heldout", "held out", "#6f93bf"),
            ("shifted", "shifted", "#c9ced6"))
    for k, (name, label, color) in enumerate(sets):
        ax.bar([i + (k - 1) * width for i in range(len(g))], 100 * g[f"host_share_{name}"], width, color=color,
               label=label)
    ax.set_xticks(range(len(g)))
    ax.set_xticklabels([str(p).replace("-", " ") for p in g["plan"]], fontsize=7)
    ax.set_ylabel("traffic from host (%)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3)


