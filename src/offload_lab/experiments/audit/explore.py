"""The fit audit in the explore notebook: what each GPU holds per (checkpoint, plan), and the traffic from host
(``offload_lab.paper.explore`` finds this module at run time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.paper.explore import View, csv
from matplotlib.figure import Figure

from offload_lab.paper.explore_plots import COLORS

TABLES: dict[str, Callable[[Path], pd.DataFrame]] = {"fit": csv("fit.csv"), "generators": csv("generators.csv")}


def plot(tables: dict[str, pd.DataFrame], view: View) -> Any | None:
    frame = tables.get("fit")
    return None if frame is None or frame.empty else plot_fit(frame, view.short)


def plot_fit(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    """What each GPU holds per plan, one panel per checkpoint on its own scale (on one 0 to 140 GiB axis the tiny
    model's bar was invisible), the usable memory as a black tick, each bar labelled with its GiB."""
    rows = frame.drop_duplicates(["checkpoint", "plan"]).reset_index(drop=True)
    checkpoints = list(dict.fromkeys(rows["checkpoint"]))
    fig = Figure(figsize=(7.5, 0.42 * len(rows) + 0.7 * len(checkpoints) + 0.6), layout="constrained")
    axes = fig.subplots(len(checkpoints), 1, squeeze=False,
                        height_ratios=[max(1, (rows["checkpoint"] == c).sum()) for c in checkpoints])[:, 0]
    for ax, checkpoint in zip(axes, checkpoints):
        part = rows[rows["checkpoint"] == checkpoint].reset_index(drop=True)
        ax.grid(True, axis="x", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
        ax.barh(range(len(part)), part["per_gpu_gib"], color=[COLORS[0] if f else COLORS[6] for f in part["fits"]])
        for y, (u, v) in enumerate(zip(part["usable_gib"], part["per_gpu_gib"])):
            ax.plot([u, u], [y - 0.4, y + 0.4], color="black", linewidth=1.2, gid="guide",
                    label="usable per GPU" if y == 0 else None)
            ax.annotate(_gib(v), (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
        ax.set_yticks(range(len(part)), [str(p) for p in part["plan"]], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.18 * max(part["per_gpu_gib"].max(), part["usable_gib"].max()))
        ax.set_title(f"checkpoint {checkpoint}", fontsize=8, loc="left")
        ax.set_xlabel("GiB per GPU")
    axes[0].legend(fontsize=7, frameon=False, loc="lower right", bbox_to_anchor=(1.0, 1.0), borderaxespad=0)
    fig.suptitle("What each GPU holds per plan (red: does not fit)", fontsize=10, x=0.01, ha="left")
    return fig


def _gib(v: float) -> str:
    return f"{v:.3g} GiB" if v < 10 else f"{v:.0f} GiB"
