"""Claims of the streams section: the concurrency experiment, every regime, against the bar."""

from __future__ import annotations

import functools

from typing import Any

import pandas as pd

from offload_lab.load.bar import bar_of, margin_of
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (fmt_int, fmt_list_words, fmt_pct,
                                       fmt_sig, table_value, words as _words)
from offload_lab.core.runs import MANIFEST

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


# streams and the bar: the concurrency experiment, every regime
# ====================================================================================================================

CONC = "concurrency"


def _verdicts(src: Sources, prefix: str = "") -> dict[str, Any]:
    return src.json(prefix + "verdicts.json")


def _regimes(src: Sources) -> pd.DataFrame:
    return src.csv("regimes.csv")


def _order(src: Sources) -> list[str]:
    """Regimes in the order the campaign file lists them (the verdicts keep it)."""
    return list(_verdicts(src))


def held_phrase(verdicts: dict[str, Any], max_streams: dict[str, int], bar: float) -> str:
    """Which regime held the bar longest, with ties and regimes that never lost it said as such."""
    if not verdicts:
        raise ValueError("no regime has a verdict")
    held = {r: int(v["held_bar_up_to_streams"]) for r, v in verdicts.items()}
    never_lost = [r for r, v in verdicts.items() if v.get("first_level_below_bar") is None]
    best = max(held.values())
    top = [r for r, h in held.items() if h == best]
    bar_s = f"{bar:g}"
    if len(never_lost) == len(verdicts):
        most = sorted(set(max_streams.values()))
        upto = fmt_list_words([str(m) for m in most])
        one = "the one regime" if len(verdicts) == 1 else "every regime"
        return (f"{one} held the bar of {bar_s} tokens/s at every level measured, up to {upto} streams, so this "
                f"sweep does not say where it would lose it")
    if best == 0:
        return f"no regime held the bar of {bar_s} tokens/s even with one stream"
    names = fmt_list_words([_words(r) for r in top])
    first_lost = {r: v.get("first_level_below_bar") for r, v in verdicts.items()
                  if v.get("first_level_below_bar") is not None}
    worst = min(first_lost.values())
    worst_names = fmt_list_words([_words(r) for r, n in first_lost.items() if n == worst])
    tail = f"; {worst_names} lost it first, at {worst} streams" if set(top) != set(first_lost) else ""
    if all(r in never_lost for r in top):
        verb = "held" if len(top) == 1 else "each held"
        return f"{names} {verb} the bar at every level measured, up to {best} streams, the longest{tail}"
    verb = "held" if len(top) == 1 else "each held"
    return f"{names} {verb} the bar longest, up to {best} streams, and then lost it{tail}"


@claim("concurrency.bar_tok_s", experiment=CONC, files=[MANIFEST], fmt="{:g}", unit="tokens/s")
def _bar(src: Sources) -> float:
    """The bar: median output tokens per second per stream."""
    return bar_of(src.parameters)


@claim("concurrency.bar_ms", experiment=CONC, files=[MANIFEST], fmt="{:g}", unit="ms")
def _bar_ms(src: Sources) -> float:
    """The bar as time per output token."""
    return 1000.0 / bar_of(src.parameters)


@claim("concurrency.margin", experiment=CONC, files=[MANIFEST], fmt=fmt_pct(0), unit="fraction")
def _margin(src: Sources) -> float:
    """Provisioning margin over the bar."""
    return margin_of(src.parameters)


@claim("concurrency.regimes", experiment=CONC, files=["verdicts.json"], fmt=fmt_int, unit="regimes")
def _n_regimes(src: Sources) -> int:
    """Regimes swept."""
    return len(_verdicts(src))


@claim("concurrency.streams", experiment=CONC, files=[MANIFEST], fmt=fmt_list_words, unit="streams")
def _streams(src: Sources) -> list[str]:
    """Stream counts of the sweep."""
    return [str(int(n)) for n in src.parameters["streams"]]


@claim("concurrency.requests_per_stream", experiment=CONC, files=[MANIFEST], fmt=fmt_int, unit="requests")
def _rps(src: Sources) -> int:
    """Requests each stream sends at a level."""
    return int(src.parameters["requests_per_stream"])


@claim("concurrency.requests", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _requests(src: Sources) -> int:
    """Requests sent over all regimes and levels."""
    return int(_regimes(src)["requests"].sum())


@claim("concurrency.in_window", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _in_window(src: Sources) -> int:
    """Requests whose tokens fell inside the window where every stream was in flight (the ones counted)."""
    return int(_regimes(src)["ok_in_window"].sum())


@claim("concurrency.errors", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _errors(src: Sources) -> int:
    """Requests that failed, over all regimes and levels."""
    return int(_regimes(src)["errors"].sum())


@claim("concurrency.held_phrase", experiment=CONC, files=["verdicts.json", "regimes.csv", MANIFEST], fmt="{}",
       unit="")
def _held(src: Sources) -> str:
    """Which regime held the bar longest, in words computed from the verdicts."""
    t = _regimes(src)
    maxes = {str(r): int(g["streams"].max()) for r, g in t.groupby("regime")}
    return held_phrase(_verdicts(src), maxes, bar_of(src.parameters))


@claim("concurrency.all_held", experiment=CONC, files=["verdicts.json"], fmt="{}", unit="")
def _all_held(src: Sources) -> str:
    """Whether every regime held the bar at every level measured ("yes"/"no")."""
    return "yes" if all(v.get("first_level_below_bar") is None for v in _verdicts(src).values()) else "no"


@claim("concurrency.provisioning_min", experiment=CONC, files=["verdicts.json"], fmt=fmt_int, unit="streams")
def _prov_min(src: Sources) -> int:
    """The fewest streams any regime can be provisioned for with the margin (the binding regime)."""
    return min(int(v["provisioning_streams"]) for v in _verdicts(src).values())


@claim("concurrency.provisioning_regime", experiment=CONC, files=["verdicts.json"], fmt="{}", unit="")
def _prov_regime(src: Sources) -> str:
    """The regime (or regimes) that bind the provisioning count."""
    v = _verdicts(src)
    low = min(int(x["provisioning_streams"]) for x in v.values())
    return fmt_list_words([_words(r) for r, x in v.items() if int(x["provisioning_streams"]) == low])


@claim("concurrency.table", experiment=CONC, files=["regimes.csv", "verdicts.json", MANIFEST], kind="table")
def _conc_table(src: Sources) -> dict[str, Any]:
    """Per regime: prompt, cached share, what it held, and the per-stream rate at one stream and at the most."""
    t = _regimes(src)
    specs = src.parameters.get("regimes") or {}
    v = _verdicts(src)
    sig = fmt_sig(3)
    rows = []
    for name in _order(src):
        spec = specs.get(name, {})
        g = t[t["regime"] == name].sort_values("streams")
        if g.empty:
            continue
        kind = spec.get("regime", name)
        if kind == "short" or kind == "cold_prefill":
            prompt, cached = fmt_int(spec.get("prompt_tokens", 0)), "none"
        else:
            prompt = fmt_int(int(spec.get("prefix_tokens", 0)) + int(spec.get("suffix_tokens", 0)))
            cached = fmt_int(spec.get("prefix_tokens", 0)) + (" shared" if kind == "shared_prefix" else " each")
        first, last = g.iloc[0], g.iloc[-1]
        lost = v[name].get("first_level_below_bar")
        rows.append([_words(name), prompt, cached, str(int(v[name]["held_bar_up_to_streams"])),
                     "not lost" if lost is None else str(int(lost)), str(int(v[name]["provisioning_streams"])),
                     sig(first["tok_s_median"]), f"{sig(last['tok_s_median'])} ({int(last['streams'])})",
                     sig(last["tok_s_p5"])])
    return table_value(["Regime", "Prompt", "Cached", "Held to", "Lost at", "Provision", "Median at one",
                        "Median at most", "p5 at most"], rows, "lrlrrrrrr")


@claim("concurrency.cache_misses", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _misses(src: Sources) -> int:
    """Counted requests whose prompt the prefix cache did not serve as expected."""
    return int(_regimes(src)["cache_misses"].fillna(0).sum())


@claim("concurrency.cache_checked", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _checked(src: Sources) -> int:
    """Counted requests whose cached tokens were checked against what the regime primed."""
    return int(_regimes(src)["cache_checked"].fillna(0).sum())


@claim("concurrency.kv_usage_max", experiment=CONC, files=["regimes.csv"], fmt=fmt_pct(1), unit="fraction")
def _kv_max(src: Sources) -> float:
    """Largest KV-cache usage the server reported during any level."""
    v = _regimes(src)["kv_cache_usage_max"].dropna()
    if v.empty:
        raise ValueError("no level scraped the server's KV-cache usage")
    return float(v.max())


@claim("concurrency.lag_levels", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="levels")
def _lag(src: Sources) -> int:
    """Levels at which the load client's own event-loop lag reached a tenth of the median TPOT it measured."""
    return int(_regimes(src)["client_lag_flag"].astype(str).str.lower().eq("true").sum())


@claim("concurrency.levels", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="levels")
def _levels(src: Sources) -> int:
    """Levels measured over all regimes."""
    return int(len(_regimes(src)))


# ====================================================================================================================
