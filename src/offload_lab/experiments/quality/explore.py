"""The quality experiment in the explore notebook (``offload_lab.paper.explore`` finds this module at run time).

A comparison run gives one row per benchmark: its ``comparison.csv`` with the greedy-answer agreement
(``agreement.csv``) beside it. A run of one side (``side: local`` / ``reference``) gives that side's score summary,
one row per benchmark, with ``side`` naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.experiments.quality.runner import AGREEMENT_CSV, COMPARISON_CSV, SIDES
from offload_lab.paper.explore import View
from offload_lab.paper.explore_plots import COLORS, legend, new_figure


def read(run_dir: Path) -> pd.DataFrame:
    run_dir = Path(run_dir)
    if (run_dir / COMPARISON_CSV).is_file():
        frame = pd.read_csv(run_dir / COMPARISON_CSV)
        agreement = run_dir / AGREEMENT_CSV
        if agreement.is_file():
            extra = pd.read_csv(agreement)
            keep = ["benchmark"] + [c for c in extra.columns if c not in frame.columns]
            frame = frame.merge(extra[keep], on="benchmark", how="left")
        return frame
    sides = sorted(p for p in (run_dir / SIDES).glob("*/summary.csv")) if (run_dir / SIDES).is_dir() else []
    if not sides:
        raise FileNotFoundError(f"{run_dir} holds neither {COMPARISON_CSV} nor a scored side")
    return pd.concat([pd.read_csv(p).assign(side=p.parent.name) for p in sides], ignore_index=True)


TABLES: dict[str, Callable[[Path], pd.DataFrame]] = {"quality": read}


def plot(tables: dict[str, pd.DataFrame], view: View) -> Any | None:
    """A comparison's accuracies (and identical answers); for runs of one side, each side's answers by status."""
    frame = tables.get("quality")
    if frame is None or frame.empty:
        return None
    compared = frame[frame["reference_accuracy"].notna()] if "reference_accuracy" in frame else frame[:0]
    if not compared.empty:
        return plot_quality(compared, view.short)
    fig, (ax,) = new_figure()
    plot_statuses(frame, ax)
    return fig


def plot_statuses(frame: pd.DataFrame, ax: Any) -> None:
    """A side's answers by status per benchmark (replicate 0), stacked: what a score of zero is made of."""
    rows = frame[frame["replicate"] == 0] if "replicate" in frame else frame
    statuses = [c for c in rows.columns if c.startswith("n_") and rows[c].fillna(0).sum() > 0]
    names = [str(b) for b in rows["benchmark"]]
    bottom = [0.0] * len(rows)
    for k, col in enumerate(statuses):
        values = list(rows[col].fillna(0))
        ax.bar(names, values, 0.5, bottom=bottom, label=col[2:], color=f"C{k}")
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("answers (replicate 0)")
    ax.set_xlabel("benchmark")
    ax.set_title("A side's answers by status", fontsize=9, loc="left")
    ax.legend(fontsize=7, frameon=False)


def plot_quality(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    """Accuracy of each side per benchmark and, where the run has it, the share of identical answers."""
    latest = frame[frame["run_id"] == frame["run_id"].max()]
    has_agree = "agree_share" in latest and latest["agree_share"].notna().any()
    fig, axes = new_figure(8.0 if has_agree else 5.0, 2.8, ncols=2 if has_agree else 1)
    names = list(latest["benchmark"])
    xs = range(len(names))
    # Points, not bars: an accuracy of zero (the random-weight model's) is a visible point on the axis, where a bar of
    # height zero left an empty panel under its legend.
    for k, (col, lab) in enumerate((("reference_accuracy", "reference"), ("local_accuracy", "local"))):
        if col in latest:
            ys = latest[col].fillna(0)
            axes[0].scatter([x + (k - 0.5) * 0.2 for x in xs], ys, color=COLORS[k], label=lab, s=28, zorder=3,
                            clip_on=False)
            for x, y in zip(xs, ys):
                axes[0].annotate(f"{y:.2f}", (x + (k - 0.5) * 0.2, y), xytext=(0, 5), textcoords="offset points",
                                 ha="center", fontsize=6)
    axes[0].set_ylabel("accuracy (share of items right)")
    axes[0].set_ylim(0, 1.05)
    axes[0].set_title("Accuracy per benchmark", fontsize=9, loc="left")
    if has_agree:
        axes[1].bar(xs, 100 * latest["agree_share"].fillna(0), 0.5, color=COLORS[2], label="reference vs local")
        for k, (col, lab) in enumerate((("self_agree_reference", "reference vs itself"),
                                        ("self_agree_local", "local vs itself"))):
            if col in latest:
                axes[1].scatter([x + (k - 0.5) * 0.2 for x in xs], 100 * latest[col], color=COLORS[k], zorder=3,
                                label=lab, s=18)
        axes[1].set_ylabel("answers identical token for token (%)")
        axes[1].set_ylim(0, 105)
        axes[1].set_title("Identical answers", fontsize=9, loc="left")
    for ax in axes:
        ax.set_xticks(list(xs), names)
        legend(ax)
    return fig
