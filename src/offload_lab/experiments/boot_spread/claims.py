"""Claims of the repeated boots: the spread between boots beside the spread within one."""

from __future__ import annotations

import functools

from typing import Any, Callable

import pandas as pd

from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (fmt_int, fmt_list_words, fmt_pct,
                                       fmt_sig, plural, table_value, words as _words)
from offload_lab.core.runs import MANIFEST

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


@claim("spread.experiment", experiment=SPREAD, files=[MANIFEST], fmt="{}", unit="")
def _spread_exp(src: Sources) -> str:
    """The experiment repeated after each boot."""
    name = str(src.parameters.get("experiment", "context_repeat"))
    return _words(name[: -len("_repeat")] if name.endswith("_repeat") else name)


@claim("spread.requests_min", experiment=SPREAD, files=["boot_spread.csv"], fmt=fmt_int, unit="requests")
def _spread_n(src: Sources) -> int:
    """Fewest successful requests behind any one boot's median."""
    return int(_spread(src)["n_min"].min())


@claim("spread.permutations", experiment=SPREAD, files=[MANIFEST], fmt=fmt_int, unit="permutations")
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


def _busy(f: pd.DataFrame) -> int:
    """Boots measured while another vLLM server ran on the same machine (0 when none, or not recorded)."""
    col = pd.to_numeric(f.get("boots_with_other_servers", pd.Series(dtype=float)), errors="coerce")
    return int(col.max()) if col.notna().any() else 0


@claim("spread.judged", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="")
def _spread_judged(src: Sources) -> str:
    """"yes" when no boot was measured beside another vLLM server on its machine, "no" otherwise: then the spread
    between boots mixes the boots with the other servers' load, and no verdict is given."""
    return "no" if _busy(_spread(src)) else "yes"


def _sd_range(g: pd.DataFrame, col: str, unit: str) -> str:
    vals = pd.to_numeric(g[col], errors="coerce").dropna()
    return _range_words(vals, fmt_sig(2)) + f" {unit}" if not vals.empty else "not measured"


@claim("spread.structure", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="")
def _spread_structure(src: Sources) -> str:
    """Where the boots ran and which spreads that lets the data tell apart, each with its count: between machines
    (the pods' medians), between boots on one machine, within a boot (requests), for TPOT (else the first metric)."""
    f = _spread(src)
    metric = "tpot_ms" if (f["metric"] == "tpot_ms").any() else str(f["metric"].iloc[0])
    g = f[f["metric"] == metric]
    unit, name = str(g["unit"].iloc[0] or ""), METRIC_WORDS.get(metric, metric)
    boots = int(g["boots"].max())
    pods = int(pd.to_numeric(g.get("pods", pd.Series([1])), errors="coerce").fillna(1).max())
    within = (f"within a boot, the SD of {name} over the requests was {_sd_range(g, 'within_sd_pooled', unit)} "
              f"({fmt_int(int(g['n_total'].min()))} requests or more per context length)")
    if pods <= 1:
        return (f"all {plural(boots, 'boot')} ran on one machine, so the spread between them is the spread after a "
                f"restart; no spread between machines is held; {within}")
    between_pods = f"between machines, the SD of the {fmt_int(pods)} machines' medians was " \
                   f"{_sd_range(g, 'between_pod_sd', unit)}"
    if pods >= boots:
        return (f"the {plural(boots, 'boot')} ran on {fmt_int(pods)} machines of the same kind, one boot each, so the "
                f"spread between boots is the spread between machines and the spread after a restart on one machine "
                f"is not measured apart from it; {between_pods}; {within}")
    return (f"the {plural(boots, 'boot')} ran on {fmt_int(pods)} machines of the same kind; {between_pods}; between "
            f"boots on the same machine, the pooled SD of the boots' medians was "
            f"{_sd_range(g, 'between_boot_within_pod_sd', unit)}; {within}")


@claim("spread.narrower", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="")
def _spread_narrower(src: Sources) -> str:
    """The metrics for which an interval from a single boot is narrower than the uncertainty about the next boot, in
    words; "none" when there is none, or when no verdict is given (boots shared their machine with other servers)."""
    return "none" if _busy(_spread(src)) else _spread_sig(src)


@claim("spread.verdict", experiment=SPREAD, files=["boot_spread.csv", MANIFEST], fmt="{}", unit="")
def _spread_verdict(src: Sources) -> str:
    """Whether the per-boot medians differ by more than the requests' own spread explains, per metric, in words;
    no verdict when boots were measured beside another vLLM server on their machine."""
    f = _spread(src)
    busy = _busy(f)
    if busy:
        boots = fmt_int(int(f["boots"].max()))
        return (f"no verdict: {fmt_int(busy)} of the {boots} boots were measured while another "
                "vLLM server ran on the same machine, so the spread between boots mixes the boots with that load")
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
    0.05 at some context length), in words, or "none"; "not judged" when boots shared their machine with other
    servers."""
    f = _spread(src)
    if _busy(f):
        return "not judged"
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
