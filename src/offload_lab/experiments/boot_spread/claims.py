"""Claims of the repeated boots: the spread between boots beside the spread within one."""

from __future__ import annotations

import functools

from typing import Any, Callable

import pandas as pd

from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (fmt_int, fmt_list_words, fmt_pct,
                                       fmt_sig, plural, table_value, words as _words)

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


# ====================================================================================================================
# repeated boots: the spread between boots beside the spread within one (experiment boot_spread, issue 7's analysis
# in offload_lab.experiments.boot_spread.runner, of a campaign with repeat_boots)
# ====================================================================================================================

SPREAD = "boot_spread"
METRIC_WORDS = {"tpot_ms": "TPOT", "ttft_s": "TTFT", "tok_s": "tokens/s per stream", "itl_ms": "ITL"}


def _spread(src: Sources, metric: str | None = None) -> pd.DataFrame:
    f = src.csv("boot_spread.csv")
    if metric is not None:
        f = f[f["metric"] == metric]
        if f.empty:
            raise ValueError(f"boot_spread.csv has no rows for {metric}")
    return f.sort_values(["metric", "group"]).reset_index(drop=True)


def fmt_p(value: Any) -> str:
    """A p-value: two significant figures, or "<0.001"."""
    v = float(value)
    return "<0.001" if v < 0.001 else fmt_sig(2)(v)


def _range_words(values: Any, fmt: Callable[[Any], str]) -> str:
    lo, hi = float(min(values)), float(max(values))
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


@claim("spread.boots", experiment=SPREAD, files=["boot_spread.csv"], fmt=fmt_int, unit="boots")
def _spread_boots(src: Sources) -> int:
    """Boots the repeated experiment ran after."""
    return int(_spread(src)["boots"].max())


@claim("spread.boots_words", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="")
def _spread_boots_words(src: Sources) -> str:
    """Boots the repeated experiment ran after, in words."""
    return plural(int(_spread(src)["boots"].max()), "boot")


@claim("spread.experiment", experiment=SPREAD, files=["manifest.json"], fmt="{}", unit="")
def _spread_exp(src: Sources) -> str:
    """The experiment repeated after each boot."""
    name = str(src.parameters.get("experiment", "context_repeat"))
    return _words(name[: -len("_repeat")] if name.endswith("_repeat") else name)


@claim("spread.requests_min", experiment=SPREAD, files=["boot_spread.csv"], fmt=fmt_int, unit="requests")
def _spread_n(src: Sources) -> int:
    """Fewest successful requests behind any one boot's median."""
    return int(_spread(src)["n_min"].min())


@claim("spread.permutations", experiment=SPREAD, files=["manifest.json"], fmt=fmt_int, unit="permutations")
def _spread_perms(src: Sources) -> int:
    """Shuffles of the boot labels behind each permutation p."""
    return int(src.parameters.get("permutations", 10_000))


for _m in ("tpot_ms", "ttft_s"):
    claim(f"spread.{_m}.ratio_range", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="ratio",
          description=f"{METRIC_WORDS[_m]}: SD of the per-boot medians over the pooled within-boot SD, over the groups")(
        lambda src, _m=_m: _range_words(_spread(src, _m)["between_over_within_sd"], lambda v: fmt_sig(2)(v) + "×"))
    claim(f"spread.{_m}.range_rel", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="fraction",
          description=f"{METRIC_WORDS[_m]}: range of the per-boot medians over their median, over the groups")(
        lambda src, _m=_m: _range_words(_spread(src, _m)["between_range_rel"], fmt_pct(0)))
    claim(f"spread.{_m}.icc_range", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="",
          description=f"{METRIC_WORDS[_m]}: intraclass correlation (share of the variance between boots), over the "
                      "groups")(lambda src, _m=_m: _range_words(_spread(src, _m)["icc"], lambda v: f"{float(v):.2f}"))


@claim("spread.verdict", experiment=SPREAD, files=["boot_spread.csv", "manifest.json"], fmt="{}", unit="")
def _spread_verdict(src: Sources) -> str:
    """Whether the per-boot medians differ by more than the requests' own spread explains, per metric, in words."""
    f = _spread(src)
    parts = []
    for metric, g in f.groupby("metric", sort=True):
        name = METRIC_WORDS.get(str(metric), str(metric))
        sig = (g["permutation_p"] < 0.05).sum()
        p_max = float(g["permutation_p"].max())
        p_words = "below 0.001" if p_max < 0.001 else f"at most {fmt_p(p_max)}"
        if sig == len(g):
            parts.append(f"for {name} the boots differ by more than the spread within a boot explains at every "
                         f"context length (permutation p {p_words})")
        elif sig == 0:
            parts.append(f"for {name} the boots differ by no more than the spread within a boot explains "
                         "(every permutation p at least 0.05)")
        else:
            parts.append(f"for {name} the boots differ by more than the spread within a boot explains at {sig} of "
                         f"{len(g)} context lengths")
    return "; ".join(parts)


@claim("spread.significant", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="")
def _spread_sig(src: Sources) -> str:
    """The metrics whose per-boot medians differ by more than the spread within a boot explains (permutation p below
    0.05 at some context length), in words, or "none"."""
    f = _spread(src)
    names = [METRIC_WORDS.get(str(m), str(m)) for m, g in f.groupby("metric", sort=True)
             if (g["permutation_p"] < 0.05).any()]
    return fmt_list_words(names)


@claim("spread.table", experiment=SPREAD, files=["boot_spread.csv"], kind="table")
def _spread_table(src: Sources) -> dict[str, Any]:
    """Per metric and context length: the median of the per-boot medians, the SD between boots' medians, the pooled
    SD within a boot, their ratio, the permutation p and the intraclass correlation."""
    rows = []
    for _, r in _spread(src).iterrows():
        unit = str(r.get("unit") or "")
        rows.append([f"{METRIC_WORDS.get(r['metric'], r['metric'])} ({unit})", fmt_int(r["group"]),
                     fmt_sig(3)(r["median_of_medians"]), fmt_sig(2)(r["between_sd"]), fmt_sig(2)(r["within_sd_pooled"]),
                     fmt_sig(2)(r["between_over_within_sd"]) + "×", fmt_p(r["permutation_p"]),
                     f"{float(r['icc']):.2f}"])
    return table_value(["Metric", "Context", "Median", "SD between", "SD within", "Ratio", "p", "ICC"], rows,
                       "lrrrrrrr")
