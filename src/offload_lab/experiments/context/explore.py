"""The context sweep in the explore notebook: one row per (run, context length), every request beside it, and TTFT
and TPOT against the context (``offload_lab.paper.explore`` finds this module at run time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.core.runs import EVENTS
from offload_lab.paper.explore import View, csv, events
from offload_lab.paper.explore_plots import legend, lines, new_figure

TABLES: dict[str, Callable[[Path], pd.DataFrame]] = {
    "context": csv("summary.csv"),
    "requests": lambda d: events(d, EVENTS),
}
COMPARE = [("context", "tpot_median_ms", "context_tokens")]


def plot(tables: dict[str, pd.DataFrame], view: View) -> Any | None:
    frame = tables.get("context")
    return None if frame is None or frame.empty else plot_context(frame, view.short)


def plot_context(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    fig, (a1, a2) = new_figure(8.0, 3.0, ncols=2)
    label = lambda k: short(k[0])  # noqa: E731
    lines(a1, frame, "context_tokens", "ttft_median_s", ["run_id"], label, ("ttft_p5_s", "ttft_p95_s"))
    lines(a2, frame, "context_tokens", "tpot_median_ms", ["run_id"], label, ("tpot_p5_ms", "tpot_p95_ms"))
    a1.set_ylabel("TTFT, median (s)")
    a2.set_ylabel("TPOT, median (ms)")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context tokens")
        ax.set_ylim(bottom=0)
    legend(a2)
    return fig
