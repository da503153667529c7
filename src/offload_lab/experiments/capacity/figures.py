"""Figures of the section on seats and cost: drawn from the ``capacity`` and ``cost`` runs' files.

Declared into :data:`SECTION`, so that importing this module changes nothing else; the paper finds them by folder
(:func:`offload_lab.paper.discovery.figure_registry`).
:func:`preview` draws the same figures into a run directory while its notebook runs, before the manifest lists the
files, so that a notebook shows what the paper will.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)
# One colour per α, in the campaign's order (the seat rule's first), for any number of them.
_PALETTE = ("#1f5f9e", "#b0461b", "#3c8d2f", "#7b4fa0", "#8c6d1f", "#555555")


def _colors(alphas: Any) -> dict[float, str]:
    return {a: _PALETTE[min(i, len(_PALETTE) - 1)] for i, a in enumerate(dict.fromkeys(float(x) for x in alphas))}


def _pct(alpha: float) -> str:
    return f"{100 * alpha:g}%"


@figure("seats_team_size", experiment="capacity", files=["pods_curve.csv", "volume.csv"], size_in=(6.0, 3.0))
def seats_team_size(src: Sources, ax: Any) -> None:
    """Developers per pod against team size, pods filled: the largest team P pods serve, over P, at that team size;
    by concurrency (at each α of the campaign, independent and correlated developers) and by volume."""
    curve = src.csv("pods_curve.csv")
    volume = src.csv("volume.csv")
    colors = _colors(curve["alpha"])
    for (alpha, rho), part in curve.groupby(["alpha", "rho"]):
        part = part.sort_values("pods")
        label = f"α = {_pct(alpha)}" + (", independent" if rho == 0 else f", ρ = {rho:g}")
        ax.plot(part["max_team"], part["max_team"] / part["pods"], "-" if rho == 0 else ":", linewidth=1.4,
                color=colors[float(alpha)], label=label)
    left = float(curve["max_team"].min())
    for _, row in volume.iterrows():
        ax.axhline(row["seats_by_volume"], color="#2b7a3d", linestyle="--", linewidth=1.0)
        ax.annotate(f"by volume, {100 * row['utilization']:g}% utilization", (left, row["seats_by_volume"]),
                    textcoords="offset points", xytext=(2, 3), fontsize=7, color="#2b7a3d")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("developers in the team")
    ax.set_ylabel("developers per pod")
    # Beside the axes, not in them: inside, the legend sat on the curves whatever corner it took.
    ax.figure.legend(*ax.get_legend_handles_labels(), frameon=False, loc="outside right center", fontsize=7)


@figure("seats_correlation", experiment="capacity", files=["correlation.csv"])
def seats_correlation(src: Sources, ax: Any) -> None:
    """The largest team one pod serves against the intra-team correlation ρ (beta-binomial), for each α."""
    corr = src.csv("correlation.csv")
    colors = _colors(corr["alpha"])
    for alpha, part in corr.groupby("alpha"):
        part = part.sort_values("rho")
        ax.plot(part["rho"], part["seats_per_pod"], marker="o", markersize=3.5, linewidth=1.4,
                color=colors[float(alpha)], label=f"α = {_pct(alpha)}")
    ax.set_xlabel("intra-team correlation ρ")
    ax.set_ylabel("developers one pod serves")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False)


@figure("cost_team_size", experiment="cost", files=["teams.csv"])
def cost_team_size(src: Sources, ax: Any) -> None:
    """Monthly cost against team size, in the campaign's currency: subscriptions, and pods sized by the seat rule at
    each of the campaign's α."""
    t = src.csv("teams.csv")
    first = t[t["alpha"] == t["alpha"].iloc[0]]
    colors = _colors(t["alpha"])
    ax.plot(first["team"], first["subscriptions_per_month"] / 1000, color="#333333", linewidth=1.4,
            label="subscriptions")
    for alpha, part in t.groupby("alpha", sort=False):
        ax.plot(part["team"], part["self_hosted_per_month"] / 1000, drawstyle="steps-post", linewidth=1.3,
                color=colors[float(alpha)], label=f"self-hosted, α = {_pct(alpha)}")
    ax.set_xlabel("developers in the team")
    ax.set_ylabel(f"thousand {t['currency'].iloc[0]} a month")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="upper left")


def preview(run_dir: Path | str, experiment: str) -> list[Path]:
    """Draw this section's figures of ``experiment`` from a run in progress into ``run_dir/figures/*.png``."""
    from matplotlib.figure import Figure

    from offload_lab.core import runs

    run_dir = Path(run_dir)
    manifest = runs.load_manifest(run_dir)
    out = []
    for name, d in SECTION.items():
        if d.experiment != experiment:
            continue
        # Outside pyplot: no backend is chosen, so a notebook's inline plots keep working after this.
        fig = Figure(figsize=d.size_in, layout="constrained")
        ax = fig.subplots()
        try:
            d.draw(Sources(f"figure {name}", run_dir, manifest, d.files), ax)
            target = run_dir / "figures" / f"{name}.png"
            target.parent.mkdir(exist_ok=True)
            runs.atomic_savefig(fig, target, dpi=150, metadata={"Software": None})
            out.append(target)
        finally:
            fig.clear()
    return out
