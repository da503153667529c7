"""The quality experiment's table for the explore notebook (``offload_lab.paper.explore`` finds it at run time).

A comparison run gives one row per benchmark: its ``comparison.csv`` with the greedy-answer agreement
(``agreement.csv``) beside it. A run of one side (``side: local`` / ``reference``) gives that side's score summary,
one row per benchmark, with ``side`` naming it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from offload_lab.experiments.quality.runner import AGREEMENT_CSV, COMPARISON_CSV, SIDES


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


def plot(frame: pd.DataFrame, ax) -> None:  # noqa: ANN001 - a matplotlib Axes
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
    ax.legend(fontsize=7, frameon=False)
