"""The explore notebook's view of a stream sweep (``load.sweep``'s files: ``regimes.csv``, ``verdicts``, one
``events.jsonl`` per regime), shared by every experiment that runs one: one row per (run, regime, streams), the
verdict per regime, every request, and the rate per stream against the streams with the bar."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.paper.explore import View, csv, events, verdicts
from offload_lab.paper.explore_plots import plot_levels

TABLES: dict[str, Callable[[Path], pd.DataFrame]] = {
    "levels": csv("regimes.csv"),
    "verdicts": verdicts,
    "requests": lambda d: events(d, "*/events.jsonl"),
}
COMPARE = [("levels", "tok_s_median", ["experiment", "regime", "streams"])]


def plot(tables: dict[str, pd.DataFrame], view: View) -> Any | None:
    frame = tables.get("levels")
    if frame is None or frame.empty:
        return None
    bars = [float(p["bar_tok_s"]) for p in view.parameters() if "bar_tok_s" in p]
    return plot_levels(frame, view.short, bars)
