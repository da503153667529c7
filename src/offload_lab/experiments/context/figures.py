"""Figures of the context experiment: TPOT and TTFT against context length, and prefill cold and cached."""

from __future__ import annotations

import functools

from typing import Any

from offload_lab.core.runs import MANIFEST
from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure
from offload_lab.experiments.context.tables import SUMMARY, context_summary

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)


def _context_axis(ax: Any, tokens: Any) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(tokens))
    ax.set_xticklabels([f"{int(t):,}" for t in tokens])
    ax.minorticks_off()
    ax.set_xlabel("prompt tokens")


def _band(ax: Any, x: Any, median: Any, lo: Any, hi: Any, color: str, label: str) -> None:
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0, label="p5–p95")
    ax.plot(x, median, marker="o", markersize=3.5, color=color, linewidth=1.4, label=label)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="upper left")


def _median_band(src: Sources, ax: Any, metric: str, unit: str, color: str, label: str) -> None:
    s = context_summary(src)
    x = s["context_tokens"]
    _band(ax, x, s[f"{metric}_median_{unit}"], s[f"{metric}_p5_{unit}"], s[f"{metric}_p95_{unit}"], color,
          f"median {label}")
    _context_axis(ax, x)
    ax.set_ylabel(f"{label} ({unit})")


@figure("context_tpot", experiment="context", files=[SUMMARY])
def context_tpot(src: Sources, ax: Any) -> None:
    """Median decode time per output token against prompt length, with the p5–p95 band."""
    _median_band(src, ax, "tpot", "ms", "#1f5f9e", "TPOT")


@figure("context_ttft", experiment="context", files=[SUMMARY])
def context_ttft(src: Sources, ax: Any) -> None:
    """Median time to first token against prompt length, with the p5–p95 band."""
    _median_band(src, ax, "ttft", "s", "#b0461b", "TTFT")


@figure("prefill_cold_cached", experiment="context",
        files=[SUMMARY, "concurrency:regimes.csv", f"concurrency:{MANIFEST}"], size_in=(6.0, 2.9))
def prefill_cold_cached(src: Sources, ax: Any) -> None:
    """Time to first token against prompt length: fresh prompts (the context experiment, one request at a time) and
    prompts whose prefix the server had cached (the concurrency regimes, one stream)."""
    from offload_lab.experiments.context.claims_prefill import cached_points

    s = context_summary(src)
    x = s["context_tokens"]
    ax.fill_between(x, s["ttft_p5_s"], s["ttft_p95_s"], color="#b0461b", alpha=0.2, linewidth=0)
    ax.plot(x, s["ttft_median_s"], marker="o", markersize=3.5, color="#b0461b", linewidth=1.4,
            label="cold: a fresh prompt (median, p5–p95)")
    cached = cached_points(src)
    markers = {"shared_prefix": "s", "private_context": "D"}
    for kind, g in cached.groupby("kind", sort=False):
        ax.errorbar(g["prompt_tokens"], g["ttft_median_s"],
                    yerr=[[0] * len(g), (g["ttft_p95_s"] - g["ttft_median_s"]).clip(lower=0)],
                    fmt=markers.get(str(kind), "o"), markersize=5, color="#1f5f9e", capsize=2, linewidth=1.0,
                    label=f"cached: {str(kind).replace('_', ' ')} (median, to p95)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(x))  # the cold lengths; a cached prompt sits at its own length between them
    ax.set_xticklabels([f"{int(t):,}" for t in x])
    ax.minorticks_off()
    # Ticks at 1, 2 and 5 of every decade, printed plainly: the data may span less than one decade, where the
    # default log axis would print a single label.
    from matplotlib.ticker import LogLocator, StrMethodFormatter

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TTFT (s), log scale")
    ax.legend(frameon=False, loc="upper left")


