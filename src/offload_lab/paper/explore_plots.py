"""One picture per experiment for the explore notebook, drawn from :class:`~offload_lab.paper.explore.CampaignTables`.

Every figure is a :class:`matplotlib.figure.Figure` made outside pyplot: drawing it chooses no backend, so the
notebook's inline display (and a later ``plt.show()``) works as the user set it up. The notebook shows a returned
figure with ``display(fig)``; nothing here calls ``matplotlib.use``.

An experiment folder's ``explore.py`` draws its own picture with the helpers here (:func:`new_figure`, :func:`lines`,
:func:`legend`, :data:`COLORS`); an experiment without one gets :func:`plot_generic`: its first numeric column against
the first that varies, one line per run, or bars when there are only a few rows with a label. Nothing here names an
experiment.
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


def legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, frameon=False)


# A column's unit from its name's ending, so that an axis reads "TTFT (s), median" rather than "ttft_median_s".
_STATS = ("median", "mean", "p5", "p50", "p90", "p95", "p99", "min", "max", "sd")
_UNITS = (("tok_s", "tokens/s"), ("eur_per_month", "EUR/month"), ("eur_per_hour", "EUR/hour"), ("ms", "ms"),
          ("s", "s"), ("gib", "GiB"), ("gb", "GB"), ("mb", "MB"), ("gbps", "GB/s"), ("eur", "EUR"), ("usd", "USD"),
          ("pct", "%"), ("tokens", "tokens"), ("bytes", "bytes"))
_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "end to end", "kv": "KV", "gpu": "GPU", "tok": "tokens"}


def label_of(column: Any) -> str:
    """An axis label from a column name: its words, its unit in brackets, its statistic after a comma."""
    parts = str(column).split("_")
    stat = [w for w in parts if w in _STATS]
    parts = [w for w in parts if w not in _STATS]
    unit = None
    for suffix, name in _UNITS:
        n = len(suffix.split("_"))
        if len(parts) >= n and "_".join(parts[-n:]) == suffix:
            unit, parts = name, parts[:-n]
            break
    words = " ".join(_WORDS.get(w, w) for w in parts) or ("rate" if unit == "tokens/s" else "value")
    return words + (f" ({unit})" if unit else "") + (f", {stat[0]}" if stat else "")


def finish(fig: Any, title: str) -> Any:
    """Every explore figure: a title (when it has none), and legends that neither cover what is drawn nor run past
    the edge (moved beside the axes when they did; figures.legend_covers and legend_problems decide)."""
    from offload_lab.paper.figures import legend_covers, legend_problems

    if not fig._suptitle and not any(ax.get_title() or ax.get_title(loc="left") for ax in fig.axes):
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    if legend_covers(fig) or legend_problems(fig):
        for ax in fig.axes:
            if ax.get_legend() is not None:
                ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def lines(ax: Any, frame: pd.DataFrame, x: str, y: str, by: list[str], label: Callable[[tuple], str],
           band: tuple[str, str] | None = None) -> None:
    for i, (key, g) in enumerate(frame.groupby(by, sort=True)):
        g = g.sort_values(x)
        key = key if isinstance(key, tuple) else (key,)
        color = COLORS[i % len(COLORS)]
        ax.plot(g[x], g[y], marker="o", markersize=3, color=color, label=label(key))
        if band and set(band) <= set(g.columns):
            ax.fill_between(g[x], g[band[0]], g[band[1]], color=color, alpha=0.15, linewidth=0)


# The load sweep's levels table (offload_lab.load), which several experiments write: their explore.py files draw it
# with this.
def plot_levels(frame: pd.DataFrame, short: Callable[[str], str], bars: list[float] | None = None) -> Any:
    """Median output rate per stream against streams: one colour per regime, the latest run solid and older runs
    fainter and dashed, the p5 to p95 band of the latest run, the bar as a black guide."""
    fig, (ax,) = new_figure(7.5, 3.2)
    regimes = sorted(frame["regime"].dropna().unique())
    latest = frame["run_id"].max()
    for i, regime in enumerate(regimes):
        color = COLORS[i % len(COLORS)]
        for run_id, g in frame[frame["regime"] == regime].groupby("run_id", sort=True):
            g = g.sort_values("streams")
            newest = run_id == latest
            ax.plot(g["streams"], g["tok_s_median"], marker="o", markersize=3, color=color,
                    alpha=1.0 if newest else 0.45, linestyle="-" if newest else "--",
                    label=f"{regime} ({short(run_id)})")
            if newest and {"tok_s_p5", "tok_s_p95"} <= set(g.columns):
                ax.fill_between(g["streams"], g["tok_s_p5"], g["tok_s_p95"], color=color, alpha=0.15, linewidth=0)
    for bar in sorted(set(bars or [])):
        ax.axhline(bar, color="black", linestyle=":", linewidth=1, gid="guide", label=f"bar {bar:g} tokens/s")
    ax.set_xticks(sorted(frame["streams"].dropna().unique()))
    ax.set_xlabel("streams (concurrent requests)")
    ax.set_ylabel("output tokens/s per stream, median")
    ax.set_ylim(bottom=0)
    ax.set_title("Output rate per stream against streams (band: p5 to p95, latest run)", fontsize=9, loc="left")
    # Beside the axes: inside, a legend of a dozen runs covered the lines and the bar.
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


# The percentiles shown, each only where its n supports it (core.stats.supports: p95 from 20, p99 from 100 samples).
PERCENTILES = (50, 95, 99)
# What a load run's requests measure, as `vllm bench serve` and GuideLLM report them: (column, name, unit, factor).
LATENCIES = (("ttft_s", "TTFT", "ms", 1e3), ("tpot_ms", "TPOT", "ms", 1.0), ("itl_ms", "ITL", "ms", 1.0),
             ("e2e_s", "end to end", "s", 1.0))


def _values(rows: pd.DataFrame, column: str, factor: float) -> pd.Series:
    """One latency's values over a level's good requests; ITL is per token gap, every request's gaps together."""
    if column == "itl_ms":
        gaps = [x for v in rows[column].dropna() for x in (v if isinstance(v, (list, tuple)) else [v])]
        return pd.Series(gaps, dtype=float)
    return pd.to_numeric(rows[column], errors="coerce").dropna() * factor


def percentile_row(values: pd.Series) -> dict[str, Any]:
    """n, mean, median and the percentiles its n supports (None where it does not), of one sample."""
    from offload_lab.core import stats

    n = len(values)
    row: dict[str, Any] = {"n": n, "mean": float(values.mean()) if n else None}
    for q in PERCENTILES:
        row[f"p{q}"] = float(values.quantile(q / 100)) if n and stats.supports(q, n) else None
    return row


def level_keys(requests: pd.DataFrame) -> list[str]:
    """What a load run's requests are grouped by: the regime, and the level (streams), else the context length, else
    the prompt length where a sweep varied it over a few values (not a request's own slightly varying length)."""
    has = [c for c in ("regime", "level", "context_tokens", "prompt_tokens")
           if c in requests.columns and requests[c].notna().any()]
    keys = [c for c in has if c == "regime"]
    for c in ("level", "context_tokens", "prompt_tokens"):
        if c in has and (c != "prompt_tokens" or requests[c].nunique() <= 16):
            return keys + [c]
    return keys


def latency_percentiles(requests: pd.DataFrame) -> pd.DataFrame:
    """Per run, regime and level: n, mean, median (p50), p95 and p99 of TTFT, TPOT, ITL (per token gap) and end to
    end over the level's good requests, the table `vllm bench serve` and GuideLLM print, with each percentile left
    empty where its n does not support it (core.stats: p95 from 20 samples, p99 from 100)."""
    if requests.empty or "ttft_s" not in requests:
        return pd.DataFrame()
    ok = requests[requests["ok"].fillna(False).astype(bool)] if "ok" in requests else requests
    keys = ["run_id", *level_keys(ok)]
    rows = []
    for key, g in ok.groupby(keys, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        for column, name, unit, factor in LATENCIES:
            if column not in g:
                continue
            v = _values(g, column, factor)
            if v.empty:
                continue
            rows.append({**dict(zip(keys, key)), "metric": f"{name} ({unit})", **percentile_row(v)})
    return pd.DataFrame(rows).rename(columns={"level": "streams"})


def plot_latency(requests: pd.DataFrame, short: Callable[[str], str]) -> Any | None:
    """The latest run's latency distributions, one panel per latency: the share of requests (of token gaps, for ITL)
    at or below each value, one colour per regime, darker for more streams."""
    if requests.empty or "ttft_s" not in requests:
        return None
    ok = requests[requests["ok"].fillna(False).astype(bool)] if "ok" in requests else requests
    latest = ok[ok["run_id"] == ok["run_id"].max()]
    shown = [m for m in LATENCIES[:3] if m[0] in latest and latest[m[0]].notna().any()]
    if latest.empty or not shown:
        return None
    from matplotlib import ticker

    fig, axes = new_figure(3.2 * len(shown) + 1.6, 3.0, ncols=len(shown))
    regimes = sorted(latest["regime"].dropna().unique()) if "regime" in latest else []
    # The load's levels (streams), else a sweep's prompt lengths: darker for more.
    level_col, level_word = next(((c, w) for c, w in (("level", "streams"), ("prompt_tokens", "prompt tokens"))
                                  if c in latest and latest[c].notna().any()), (None, ""))
    levels = sorted(latest[level_col].dropna().unique()) if level_col else []
    for ax, (column, name, unit, factor) in zip(axes, shown):
        for i, regime in enumerate(regimes or [None]):
            for j, level in enumerate(levels or [None]):
                g = latest
                g = g[g["regime"] == regime] if regime is not None else g
                g = g[g[level_col] == level] if level is not None else g
                v = _values(g, column, factor).sort_values()
                if v.empty:
                    continue
                shade = 0.35 + 0.65 * (j + 1) / max(1, len(levels))
                label = ", ".join(x for x in (str(regime) if regime is not None else "",
                                              f"{level:g} {level_word}" if level is not None else "") if x) or \
                    "every request"
                ax.step(v, [(k + 1) / len(v) for k in range(len(v))], where="post", color=COLORS[i % len(COLORS)],
                        alpha=shade, linewidth=1.2, label=label if ax is axes[-1] else None)
        lo, hi = ax.dataLim.x0, ax.dataLim.x1
        if lo > 0 and hi / lo > 20:  # a log axis only where the values span orders of magnitude
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel(f"{name} ({unit})" + (", log scale" if ax.get_xscale() == "log" else ""))
        ax.set_ylim(0, 1.02)
        ax.set_title(name, fontsize=9, loc="left")
    axes[0].set_ylabel("share of requests at or below" if shown[0][0] != "itl_ms" else "share at or below")
    axes[-1].legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.suptitle(f"Latency distributions, run {short(latest['run_id'].iloc[0])} (ITL: every token gap)", fontsize=10,
                 x=0.01, ha="left")
    return fig


def plot_recomputed(frame: pd.DataFrame, title: str = "") -> Any:
    """Each figure this project recomputes against the published one, with the line y = x where they agree: log
    axes when the figures span orders of magnitude, each point named by its key."""
    rows = frame.dropna(subset=["published", "recomputed"])
    rows = rows[rows["run_id"] == rows["run_id"].max()] if "run_id" in rows else rows
    pub, rec = pd.to_numeric(rows["published"]), pd.to_numeric(rows["recomputed"])
    fig, (ax,) = new_figure(5.5, 4.2)
    ax.scatter(pub, rec, color=COLORS[0], s=22, zorder=3, label="recomputed against published")
    lo, hi = float(min(pub.min(), rec.min())), float(max(pub.max(), rec.max()))
    positive = lo > 0
    if positive and hi / lo > 50:
        ax.set_xscale("log")
        ax.set_yscale("log")
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    ends = [lo / 1.5, hi * 1.5] if ax.get_xscale() == "log" else [lo - pad, hi + pad]
    ax.plot(ends, ends, color="black", linewidth=0.8, linestyle="--", gid="guide", label="y = x (agree)")
    names = rows["key"] if "key" in rows else rows.get("figure", pd.Series([""] * len(rows)))
    for x, y, name in zip(pub, rec, names):
        ax.annotate(str(name).replace("_", " "), (x, y), xytext=(4, -3), textcoords="offset points", fontsize=6,
                    color="#444444")
    units = sorted(set(rows["unit"].dropna().astype(str))) if "unit" in rows else []
    unit = f" ({units[0]})" if len(units) == 1 else " (each in its own unit)" if units else ""
    ax.set_xlabel("published" + unit)
    ax.set_ylabel("recomputed" + unit)
    ax.set_title(title or "Recomputed against published", fontsize=9, loc="left")
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    return fig


def _numeric(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in TAGS and pd.api.types.is_numeric_dtype(frame[c])
            and not pd.api.types.is_bool_dtype(frame[c]) and frame[c].notna().any()]


def _varies(column: pd.Series) -> bool:
    """Whether a number varies enough to plot against: an achieved concurrency of 3.9956 to 3.9992 does not."""
    v = pd.to_numeric(column, errors="coerce").dropna()
    if v.nunique() < 2:
        return False
    scale = max(abs(v.max()), abs(v.min()))
    return scale == 0 or (v.max() - v.min()) / scale > 0.01


def plot_generic(frame: pd.DataFrame, short: Callable[[str], str], title: str = "") -> Any | None:
    """A table's picture without knowing it. Columns with many values are sweeps, columns with a few are settings:
    the first measure (a numeric column after the first sweep) against that sweep, one line per combination of up to
    two settings (at most eight lines); a table of a dozen rows or less, or with no sweep, as bars of its
    most varied number by its first label."""
    if {"published", "recomputed"} <= set(frame.columns):
        return plot_recomputed(frame, title)
    if "run_id" in frame and frame["run_id"].nunique() > 1 and len(frame) <= 24:
        latest = frame[frame["run_id"] == frame["run_id"].max()]  # a few rows per run: the latest run's
        frame = latest if len(latest) > 1 else frame
    numeric = _numeric(frame)
    varying = [c for c in numeric if _varies(frame[c])]
    if not varying:
        return None
    labels = [c for c in frame.columns if c not in TAGS and c not in numeric and frame[c].nunique() > 1
              and not pd.api.types.is_bool_dtype(frame[c])]
    sweeps = [c for c in varying if frame[c].nunique() > 6]
    settings = [c for c in frame.columns if c in varying + labels and frame[c].nunique() <= 6][:2]
    fig, (ax,) = new_figure(7.0, 3.0)
    per_run = "run_id" in frame and len(frame) > 1 and frame["run_id"].nunique() == len(frame)
    if (len(frame) <= 12 and (labels or per_run)) or len(varying) < 2:
        # The measure: a rate or latency when the table has one (a count of requests says little), else the most varied.
        rates = [c for c in varying if any(k in c for k in ("tok_s", "ttft", "tpot", "seconds", "_s_", "_ms"))]
        y = rates[0] if rates else max(varying, key=lambda c: frame[c].nunique())
        others = [c for c in varying if c != y]
        if labels:
            names = frame[labels[0]].astype(str).str.replace("_", " ")
        elif "run_id" in frame and frame["run_id"].nunique() == len(frame):  # one row per run: by run
            names = "run " + frame["run_id"].map(lambda r: short(str(r)))
        elif others:  # no words to name a row by: the other number that varies, with its name
            names = label_of(others[0]) + " " + frame[others[0]].map(lambda v: f"{v:g}")
        else:
            names = pd.Series([f"{label_of(y)} #{i + 1}" for i in range(len(frame))], index=frame.index)
        if settings and labels and settings[0] != labels[0]:
            names = names + " (" + settings[0] + " " + frame[settings[0]].astype(str) + ")"
        ax.barh(list(names)[:30], list(frame[y])[:30], color=COLORS[0])
        ax.invert_yaxis()
        ax.set_xlabel(label_of(y))
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
        lines(ax, shown, x, y, by, lambda k: ", ".join(f"{label_of(c)} {short(str(v))}" for c, v in zip(by, k)))
        ax.set_xlabel(label_of(x))
        ax.set_ylabel(label_of(y))
        if settings:
            legend(ax)
    if title:
        ax.set_title(title, fontsize=9, loc="left")
    return fig
