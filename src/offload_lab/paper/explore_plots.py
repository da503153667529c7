"""One picture per experiment for the explore notebook, drawn from :class:`~offload_lab.paper.explore.CampaignTables`.

Every figure is a :class:`matplotlib.figure.Figure` made outside pyplot: drawing it chooses no backend, so the
notebook's inline display (and a later ``plt.show()``) works as the user set it up. The notebook shows a returned
figure with ``display(fig)``; nothing here calls ``matplotlib.use``.

An experiment of a known kind gets its own picture (:data:`PLOTTERS`); an experiment folder's ``reader.py`` may offer
``plot(frame, ax)`` for its table; anything else gets :func:`plot_generic`: its first numeric column against the
first that varies, one line per run, or bars when there are only a few rows with a label.
"""

from __future__ import annotations

from typing import Any, Callable

import pandas as pd

COLORS = ("#1f5f9e", "#d9822b", "#3a8a3a", "#9a3a9a", "#8c6d31", "#5b6b7a", "#c23b22", "#2b8c8c")
TAGS = ("experiment", "run_id", "outcome", "boot", "host", "run")


def new_figure(width: float = 7.0, height: float = 3.0, ncols: int = 1) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, list(axes)


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, frameon=False)


def _lines(ax: Any, frame: pd.DataFrame, x: str, y: str, by: list[str], label: Callable[[tuple], str],
           band: tuple[str, str] | None = None) -> None:
    for i, (key, g) in enumerate(frame.groupby(by, sort=True)):
        g = g.sort_values(x)
        key = key if isinstance(key, tuple) else (key,)
        color = COLORS[i % len(COLORS)]
        ax.plot(g[x], g[y], marker="o", markersize=3, color=color, label=label(key))
        if band and set(band) <= set(g.columns):
            ax.fill_between(g[x], g[band[0]], g[band[1]], color=color, alpha=0.15, linewidth=0)


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


def plot_context(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    fig, (a1, a2) = new_figure(8.0, 3.0, ncols=2)
    label = lambda k: short(k[0])  # noqa: E731
    _lines(a1, frame, "context_tokens", "ttft_median_s", ["run_id"], label, ("ttft_p5_s", "ttft_p95_s"))
    _lines(a2, frame, "context_tokens", "tpot_median_ms", ["run_id"], label, ("tpot_p5_ms", "tpot_p95_ms"))
    a1.set_ylabel("TTFT, median (s)")
    a2.set_ylabel("TPOT, median (ms)")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context tokens")
        ax.set_ylim(bottom=0)
    _legend(a2)
    return fig


def plot_levels(frame: pd.DataFrame, short: Callable[[str], str], bars: list[float] | None = None) -> Any:
    fig, (ax,) = new_figure(7.0, 3.0)
    _lines(ax, frame, "streams", "tok_s_median", ["regime", "run_id"], lambda k: f"{k[0]} ({short(k[1])})",
           ("tok_s_p5", "tok_s_p95"))
    for bar in sorted(set(bars or [])):
        ax.axhline(bar, color="black", linestyle="--", linewidth=1)
    ax.set_xticks(sorted(frame["streams"].dropna().unique()))
    ax.set_xlabel("streams")
    ax.set_ylabel("output tok/s per stream, median")
    ax.set_ylim(bottom=0)
    _legend(ax)
    return fig


def plot_quality(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    """Accuracy of each side per benchmark and, where the run has it, the share of identical answers."""
    latest = frame[frame["run_id"] == frame["run_id"].max()]
    has_agree = "agree_share" in latest and latest["agree_share"].notna().any()
    fig, axes = new_figure(8.0 if has_agree else 5.0, 2.8, ncols=2 if has_agree else 1)
    names = list(latest["benchmark"])
    xs = range(len(names))
    for k, (col, lab) in enumerate((("reference_accuracy", "reference"), ("local_accuracy", "local"))):
        if col in latest:
            axes[0].bar([x + (k - 0.5) * 0.38 for x in xs], latest[col].fillna(0), 0.38, color=COLORS[k], label=lab)
    axes[0].set_ylabel("accuracy")
    axes[0].set_ylim(0, 1)
    if has_agree:
        axes[1].bar(xs, 100 * latest["agree_share"].fillna(0), 0.5, color=COLORS[2], label="reference vs local")
        for k, (col, lab) in enumerate((("self_agree_reference", "reference vs itself"),
                                        ("self_agree_local", "local vs itself"))):
            if col in latest:
                axes[1].scatter([x + (k - 0.5) * 0.2 for x in xs], 100 * latest[col], color=COLORS[k], zorder=3,
                                label=lab, s=18)
        axes[1].set_ylabel("answers identical token for token (%)")
        axes[1].set_ylim(0, 105)
    for ax in axes:
        ax.set_xticks(list(xs), names)
        _legend(ax)
    return fig


def plot_fit(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    rows = frame.drop_duplicates(["checkpoint", "plan"]).reset_index(drop=True)
    fig, (ax,) = new_figure(7.0, 0.45 * len(rows) + 1.2)
    labels = [f"{c} / {p}" for c, p in zip(rows["checkpoint"], rows["plan"])]
    ax.barh(range(len(rows)), rows["per_gpu_gib"], color=[COLORS[0] if f else COLORS[6] for f in rows["fits"]])
    for y, u in enumerate(rows["usable_gib"]):
        ax.plot([u, u], [y - 0.4, y + 0.4], color="black", linewidth=1)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GiB per GPU (bar: usable)")
    return fig


def plot_spread(frame: pd.DataFrame, short: Callable[[str], str]) -> Any:
    fig, (ax,) = new_figure(7.0, 3.0)
    for i, (metric, g) in enumerate(frame.groupby("metric", sort=True)):
        g = g.sort_values("group")
        ax.errorbar([str(x) for x in g["group"]], g["median_of_medians"], yerr=g["between_sd"], fmt="o", capsize=3,
                    color=COLORS[i % len(COLORS)], label=f"{metric}: median of boots' medians, +/- sd between")
    ax.set_xlabel("group")
    _legend(ax)
    return fig


def _numeric(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in TAGS and pd.api.types.is_numeric_dtype(frame[c])
            and not pd.api.types.is_bool_dtype(frame[c]) and frame[c].notna().any()]


def plot_generic(frame: pd.DataFrame, short: Callable[[str], str], title: str = "") -> Any | None:
    """A table's picture without knowing it. Columns with many values are sweeps, columns with a few are settings:
    the first measure (a numeric column after the first sweep) against that sweep, one line per combination of up to
    two settings (at most eight lines); a table of a dozen rows or less, or with no sweep, as bars of its
    most varied number by its first label."""
    numeric = _numeric(frame)
    varying = [c for c in numeric if frame[c].nunique() > 1]
    if not varying:
        return None
    labels = [c for c in frame.columns if c not in TAGS and frame[c].dtype == object and frame[c].nunique() > 1]
    sweeps = [c for c in varying if frame[c].nunique() > 6]
    settings = [c for c in frame.columns if c in varying + labels and frame[c].nunique() <= 6][:2]
    fig, (ax,) = new_figure(7.0, 3.0)
    if (len(frame) <= 12 and labels) or len(varying) < 2:
        y = max(varying, key=lambda c: frame[c].nunique())
        names = frame[labels[0]].astype(str) if labels else pd.Series([f"row {i}" for i in range(len(frame))])
        if settings and labels and settings[0] != labels[0]:
            names = names + " (" + settings[0] + " " + frame[settings[0]].astype(str) + ")"
        ax.barh(list(names)[:30], list(frame[y])[:30], color=COLORS[0])
        ax.invert_yaxis()
        ax.set_xlabel(y)
    else:
        x = sweeps[0] if sweeps else varying[0]
        cols = list(frame.columns)
        after = cols[cols.index(x) + 1:]
        # The measure: the first column after the sweep with many values (else any other that varies).
        y = next((c for c in after if c in sweeps), None) or next((c for c in after if c in varying), None) or \
            next((c for c in varying if c != x), None)
        if y is None:
            return None
        # The settings are the columns with few values before the measure, not outcomes after it.
        by = [c for c in cols[:cols.index(y)] if c != x and c in varying + labels and frame[c].nunique() <= 6][:2]
        settings, by = by, by or ["experiment"]
        keys = frame[by].drop_duplicates().head(8)
        shown = frame.merge(keys, on=by)
        _lines(ax, shown, x, y, by, lambda k: ", ".join(f"{c} {short(str(v))}" for c, v in zip(by, k)))
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        if settings:
            _legend(ax)
    if title:
        ax.set_title(title, fontsize=9, loc="left")
    return fig


# kind -> (table of CampaignTables it draws, plotter)
PLOTTERS: dict[str, tuple[str, Callable[..., Any]]] = {
    "boots": ("boots", plot_boots),
    "context": ("context", plot_context),
    "context_repeat": ("context", plot_context),
    "concurrency": ("levels", plot_levels),
    "agent_turns": ("levels", plot_levels),
    "quality": ("quality", plot_quality),
    "audit": ("fit", plot_fit),
    "boot_spread": ("spread", plot_spread),
}
