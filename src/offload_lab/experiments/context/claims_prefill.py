"""Claims of the prefill section: cold (context) and with a cached prefix (concurrency, one stream)."""

from __future__ import annotations

import functools

import math
from typing import Any

import pandas as pd

from offload_lab.core.runs import MANIFEST
from offload_lab.experiments.context.tables import SUMMARY, context_summary
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (finite as _finite, fmt_int, fmt_pct,
                                       fmt_sig, words as _words)

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


# prefill: cold (context) and with a cached prefix (concurrency, one stream)
# ====================================================================================================================

CACHED_REGIMES = ("shared_prefix", "private_context")


def cached_points(src: Sources, prefix: str = "concurrency:") -> pd.DataFrame:
    """One row per cached-prefix regime at one stream: prompt tokens, cached tokens, median and p95 TTFT."""
    table = src.csv(prefix + "regimes.csv")
    specs = (src.parameters_of(prefix[:-1]) if prefix else src.parameters).get("regimes") or {}
    rows = []
    for name, spec in specs.items():
        if spec.get("regime") not in CACHED_REGIMES:
            continue
        sel = table[(table["regime"] == name) & (table["streams"] == 1)]
        if sel.empty or not _finite(sel.iloc[0]["ttft_median_s"]):
            continue
        r = sel.iloc[0]
        rows.append({"regime": name, "kind": spec["regime"], "cached_tokens": int(spec["prefix_tokens"]),
                     "prompt_tokens": int(spec["prefix_tokens"]) + int(spec.get("suffix_tokens") or 0),
                     "ttft_median_s": float(r["ttft_median_s"]), "ttft_p95_s": float(r["ttft_p95_s"])})
    if not rows:
        raise ValueError("no cached-prefix regime (shared_prefix, private_context) was measured at one stream")
    return pd.DataFrame(rows).sort_values("prompt_tokens").reset_index(drop=True)


def _cold_at(summary: pd.DataFrame, tokens: int) -> Any:
    """The cold row measured nearest to ``tokens`` (on a log scale)."""
    idx = (summary["context_tokens"].map(lambda n: abs(math.log(n / tokens)))).idxmin()
    return summary.loc[idx]


PREFILL_FILES = [SUMMARY, "concurrency:regimes.csv", f"concurrency:{MANIFEST}"]


def _prefill_pair(src: Sources) -> tuple[Any, Any]:
    cached = cached_points(src).iloc[-1]  # the longest cached prompt
    cold = _cold_at(context_summary(src), int(cached["prompt_tokens"]))
    return cold, cached


claim("prefill.cold_tokens", experiment="context", files=PREFILL_FILES, fmt=fmt_int, unit="tokens",
      description="Prompt length of the cold prefill compared with the longest cached one")(
    lambda src: int(_prefill_pair(src)[0]["context_tokens"]))
claim("prefill.cold_ttft_s", experiment="context", files=PREFILL_FILES, fmt=fmt_sig(3), unit="s",
      description="Median TTFT of that cold prompt")(lambda src: float(_prefill_pair(src)[0]["ttft_median_s"]))
claim("prefill.cached_tokens", experiment="context", files=PREFILL_FILES, fmt=fmt_int, unit="tokens",
      description="Cached prefix of the longest cached prompt")(
    lambda src: int(_prefill_pair(src)[1]["cached_tokens"]))
claim("prefill.cached_prompt_tokens", experiment="context", files=PREFILL_FILES, fmt=fmt_int, unit="tokens",
      description="Whole prompt of the longest cached prompt")(
    lambda src: int(_prefill_pair(src)[1]["prompt_tokens"]))
claim("prefill.cached_regime", experiment="context", files=PREFILL_FILES, fmt="{}", unit="",
      description="Regime of the longest cached prompt")(lambda src: _words(_prefill_pair(src)[1]["regime"]))
claim("prefill.cached_ttft_s", experiment="context", files=PREFILL_FILES, fmt=fmt_sig(3), unit="s",
      description="Median TTFT of the longest cached prompt, one stream")(
    lambda src: float(_prefill_pair(src)[1]["ttft_median_s"]))


@claim("prefill.cached_speedup", experiment="context", files=PREFILL_FILES, fmt=lambda v: fmt_sig(3)(v) + "×",
       unit="ratio")
def _speedup(src: Sources) -> float:
    """Cold median TTFT over cached median TTFT, at about the same prompt length."""
    cold, cached = _prefill_pair(src)
    return float(cold["ttft_median_s"]) / float(cached["ttft_median_s"])


@claim("context.prefill_tok_s.longest", experiment="context", files=[SUMMARY], fmt=fmt_int, unit="tokens/s")
def _prefill_rate(src: Sources) -> float:
    """Prefill rate of the longest cold prompt: its tokens over its median TTFT."""
    s = context_summary(src)
    return float(s["context_tokens"].iloc[-1]) / float(s["ttft_median_s"].iloc[-1])


@claim("context.tpot_p95_spread.longest", experiment="context", files=[SUMMARY], fmt=fmt_pct(0),
       unit="fraction")
def _tpot_spread(src: Sources) -> float:
    """How far p95 TPOT lies above the median at the longest context."""
    s = context_summary(src)
    return float(s["tpot_p95_ms"].iloc[-1]) / float(s["tpot_median_ms"].iloc[-1]) - 1


@claim("context.tpot_verdict", experiment="context", files=[SUMMARY], fmt="{}", unit="")
def _tpot_verdict(src: Sources) -> str:
    """Whether the change of median TPOT from the shortest to the longest context is larger than the spread
    between requests at those lengths, in words."""
    s = context_summary(src)
    lo, hi = s.iloc[0], s.iloc[-1]
    if float(hi["tpot_p5_ms"]) > float(lo["tpot_p95_ms"]):
        return "larger than the spread between requests: the p5 at the longest lies above the p95 at the shortest"
    if float(hi["tpot_p95_ms"]) < float(lo["tpot_p5_ms"]):
        return "larger than the spread between requests, downwards"
    return "within the spread between requests: the p5–p95 bands at the two ends overlap"


# ====================================================================================================================
