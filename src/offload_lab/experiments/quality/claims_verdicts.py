"""Claims of the quality section: whether each difference is inside the noise."""

from __future__ import annotations

import functools

from typing import Any


from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (fmt_int, fmt_list_words)

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


# quality: whether each difference is inside the noise
# ====================================================================================================================

QUALITY = "quality"
LABELS = {"gsm8k": "GSM8K", "ifeval": "IFEval", "humaneval": "HumanEval"}


def _resolved(row: Any) -> bool:
    """A difference is resolved when both intervals exclude zero."""
    return (float(row["ci_low"]) > 0 or float(row["ci_high"]) < 0) and \
        (float(row["newcombe_low"]) > 0 or float(row["newcombe_high"]) < 0)


@claim("quality.verdict", experiment=QUALITY, files=["comparison.csv"], fmt="{}", unit="")
def _q_verdict(src: Sources) -> str:
    """Which benchmarks' differences are outside the noise, in words."""
    f = src.csv("comparison.csv")
    names = [b for b in ("gsm8k", "ifeval", "humaneval") if b in set(f["benchmark"])]
    out = [LABELS[b] for b in names if _resolved(f[f["benchmark"] == b].iloc[0])]
    if not out:
        return ("no difference is resolved: on every benchmark the intervals of the difference include zero, so the "
                "local stack answers as well as the reference within what these items can tell")
    return (f"the difference on {fmt_list_words(out)} is resolved (both intervals exclude zero); on the others it is "
            "inside the noise")


@claim("quality.benchmarks", experiment=QUALITY, files=["comparison.csv"], fmt=fmt_int, unit="benchmarks")
def _q_n(src: Sources) -> int:
    """Benchmarks compared."""
    return int(len(src.csv("comparison.csv")))


# ====================================================================================================================


@claim("quality.any_flips", experiment=QUALITY, files=["comparison.csv"], fmt="{}", unit="")
def _q_any_flips(src: Sources) -> str:
    """Whether any item flipped, between the sides or within either side ("yes"/"no"): a chart of flips is worth
    drawing only when some did."""
    f = src.csv("comparison.csv")
    cols = [c for c in ("flip_fraction", "noise_flip_reference", "noise_flip_local") if c in f.columns]
    return "yes" if (f[cols].fillna(0) > 0).any().any() else "no"
