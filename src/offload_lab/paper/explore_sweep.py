"""The explore notebook's view of a stream sweep (``load.sweep``'s files: ``regimes.csv``, ``verdicts``, one
``events.jsonl`` per regime), shared by every experiment that runs one: one row per (run, regime, streams), the
verdict per regime, every request, and the rate per stream against the streams with the bar."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.core.runs import EVENTS
from offload_lab.paper.explore import View, csv, events, verdicts
from offload_lab.paper.explore_plots import plot_levels

# What load.sweep.summarize added after the first runs were measured: recomputed from their raw events (with the
# very function that writes the table) where an older regimes.csv lacks them.
RECOMPUTED = ("tok_s_mean", "tpot_mean_ms", "ttft_mean_s", "window_s", "output_tok_s_total", "requests_per_s")


def levels(run_dir: Path) -> pd.DataFrame:
    """A sweep's ``regimes.csv``, with total output tok/s, requests/s and the means beside the medians."""
    from offload_lab.core import runs
    from offload_lab.load import sweep
    from offload_lab.load.bar import bar_of

    frame = csv(sweep.REGIMES_TABLE)(run_dir)
    missing = [c for c in RECOMPUTED if c not in frame.columns]
    regimes = [str(r) for r in frame["regime"].unique()] if "regime" in frame.columns else []
    if not missing or not regimes or not all((Path(run_dir) / r / sweep.EVENTS).is_file() for r in regimes):
        return frame
    bar = bar_of(runs.load_manifest(run_dir).get("parameters") or {})
    again = pd.concat([sweep.summarize_run_regime(Path(run_dir), r, bar) for r in regimes], ignore_index=True)
    return frame.merge(again[["regime", "streams", *missing]], on=["regime", "streams"], how="left")


TABLES: dict[str, Callable[[Path], pd.DataFrame]] = {
    "levels": levels,
    "verdicts": verdicts,
    "requests": lambda d: events(d, f"*/{EVENTS}"),
}
COMPARE = [("levels", "tok_s_median", ["experiment", "regime", "streams"])]


def plot(tables: dict[str, pd.DataFrame], view: View) -> Any | None:
    frame = tables.get("levels")
    if frame is None or frame.empty:
        return None
    bars = [float(p["bar_tok_s"]) for p in view.parameters() if "bar_tok_s" in p]
    return plot_levels(frame, view.short, bars)
