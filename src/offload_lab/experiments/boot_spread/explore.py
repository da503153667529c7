"""The spread between boots in the explore notebook: per (metric, group) the median of the boots' medians and the
spread between them (``offload_lab.paper.explore`` finds this module at run time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.paper.explore import View, csv
from offload_lab.paper.explore_plots import COLORS, label_of, new_figure

TABLES: dict[str, Callable[[Path], pd.DataFrame]] = {"spread": csv("boot_spread.csv")}


def plot(tables: dict[str, pd.DataFrame], view: View) -> Any | None:
    frame = tables.get("spread")
    return None if frame is None or frame.empty else plot_spread(frame, view.short)


def plot_spread(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    """One panel per metric, each in its own unit (TPOT in ms and TTFT in s shared one unlabelled axis): the median
    of the boots' medians at each prompt length, with the spread between boots (+/- one sd) as a bar."""
    metrics = sorted(frame["metric"].dropna().unique())
    fig, axes = new_figure(3.6 * len(metrics), 3.0, ncols=len(metrics))
    for i, (ax, metric) in enumerate(zip(axes, metrics)):
        g = frame[frame["metric"] == metric].sort_values("group")
        ax.errorbar([str(x) for x in g["group"]], g["median_of_medians"], yerr=g["between_sd"], fmt="o", capsize=3,
                    color=COLORS[i % len(COLORS)])
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel(label_of(metric) + ", median of boots' medians")
        ax.set_title(f"{label_of(metric)}: +/- one sd between boots", fontsize=9, loc="left")
        ax.set_ylim(bottom=0)
    return fig
