"""Claims of the quality section: what the comparison says, in words computed from its files.

The sentence weighs three things, in this order: whether the two sides are the same server (an A/A run checks the
pipeline only); whether their greedy answers agree token for token (``agreement.csv``: identical answers mean the
scores cannot differ; answers that differ say the servers are not interchangeable, even where the scores cannot tell,
as on the embedded model's random weights, which score zero); and whether any difference in scores is resolved (both
intervals exclude zero). It never says "as well as" when the answers differ and the scores are all zero.
"""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_list_words, plural

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)

QUALITY = "quality"
LABELS = {"gsm8k": "GSM8K", "ifeval": "IFEval", "humaneval": "HumanEval"}
BENCHMARKS = tuple(LABELS)
FILES = ["comparison.csv", "comparison.json", "agreement.csv", "agreement_items.csv"]


def _resolved(row: Any) -> bool:
    """A difference is resolved when both intervals exclude zero."""
    return (float(row["ci_low"]) > 0 or float(row["ci_high"]) < 0) and \
        (float(row["newcombe_low"]) > 0 or float(row["newcombe_high"]) < 0)


def _items(n: int) -> str:
    # Digits, not words: this sentence sets counts side by side ("3 of 12 items").
    return f"{n} item" if n == 1 else f"{n} items"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _pooled(frame: pd.DataFrame, count: str, total: str) -> tuple[int, int] | None:
    if frame.empty or count not in frame or frame[count].isna().any():
        return None
    return int(frame[count].sum()), int(frame[total].sum())


def agreement_words(agreement: pd.DataFrame, items: pd.DataFrame) -> str | None:
    """"the greedy answers agree token for token on 3 of 12 items (25.0%; ...)", or None without answers to compare."""
    both = _pooled(agreement, "identical", "n")
    if both is None or both[1] == 0:
        return None
    same, n = both
    unit = "token" if set(agreement["basis"]) == {"token_ids"} else "character"
    floors = [p for p in (_pooled(agreement, f"self_identical_{s}", f"self_n_{s}") for s in ("reference", "local"))
              if p is not None and p[1]]
    floor = ("; each side against itself: " + " and ".join(_pct(a / m) for a, m in floors)) if floors else ""
    if same == n:
        return f"the greedy answers are identical {unit} for {unit} on all {_items(n)}{floor}"
    parts = items.loc[~items["identical"].astype(bool), "first_divergence"].dropna()
    where = (f", and where they differ they part at {unit} {int(parts.median())} (median; 0 is the first "
             f"generated {unit})") if len(parts) else ""
    return (f"the greedy answers agree {unit} for {unit} on {same} of {_items(n)} ({_pct(same / n)}"
            f"{floor}){where}")


def score_words(comparison: pd.DataFrame, answers_differ: bool | None) -> str:
    names = [b for b in BENCHMARKS if b in set(comparison["benchmark"])]
    rows = {b: comparison[comparison["benchmark"] == b].iloc[0] for b in names}
    flips = int(sum(int(r["b"]) + int(r["c"]) for r in rows.values()))
    flipped = f"{plural(flips, 'item')} {'flips' if flips == 1 else 'flip'} between right and wrong"
    resolved = [LABELS[b] for b in names if _resolved(rows[b])]
    if resolved:
        return (f"{flipped}, and the difference in scores on {fmt_list_words(resolved)} is resolved (both intervals "
                "exclude zero); on the others it is inside the noise")
    top = max(max(float(r["reference_accuracy"]), float(r["local_accuracy"])) for r in rows.values())
    if top == 0:
        return (f"{flipped}: both sides score zero on every benchmark, so the scores cannot tell them apart"
                + (" although their answers differ" if answers_differ else ""))
    if answers_differ:
        return (f"{flipped}, and no difference in scores is resolved (every interval includes zero): the answers "
                "differ, but these items cannot say which side answers better")
    return (f"{flipped}; no difference is resolved: on every benchmark the intervals of the difference include zero, "
            "so the local stack answers as well as the reference within what these items can tell")


@claim("quality.verdict", experiment=QUALITY, files=FILES, fmt="{}", unit="")
def _q_verdict(src: Sources) -> str:
    """What the comparison says, in words: same server or not, answers token for token, flips, scores."""
    doc = src.json("comparison.json")
    agreement, items = src.csv("agreement.csv"), src.csv("agreement_items.csv")
    answers = agreement_words(agreement, items)
    differ = None if agreement.empty else bool((agreement["identical"] < agreement["n"]).any())
    scores = score_words(src.csv("comparison.csv"), differ)
    same = "the two sides are one server (an A/A check of the pipeline, not a comparison): " \
        if doc.get("same_endpoint") else ""
    return same + (f"{answers}; {scores}" if answers else scores)


@claim("quality.sides", experiment=QUALITY, files=["comparison.json"], fmt="{}", unit="")
def _q_sides(src: Sources) -> str:
    """The two sides in words: each one's server (stack and dtype) or API, reference first."""
    doc = src.json("comparison.json")

    def words(role: str) -> str:
        side = doc[role]
        server = side.get("server") or {}
        if server.get("dtype") or server.get("stack"):
            bits = [b for b in (server.get("stack"), server.get("dtype")) if b]
            return f"{role}: {side['model']} served by {' in '.join(bits)}"
        return f"{role}: {side['model']} at {side['url']}"

    return "; ".join(words(r) for r in ("reference", "local"))


@claim("quality.same_endpoint", experiment=QUALITY, files=["comparison.json"], fmt="{}", unit="")
def _q_same(src: Sources) -> str:
    """Whether both sides were one server ("yes"/"no"): an A/A check of the pipeline, or a comparison of two."""
    return "yes" if src.json("comparison.json").get("same_endpoint") else "no"


@claim("quality.benchmarks", experiment=QUALITY, files=["comparison.csv"], fmt=fmt_int, unit="benchmarks")
def _q_n(src: Sources) -> int:
    """Benchmarks compared."""
    return int(len(src.csv("comparison.csv")))


@claim("quality.any_flips", experiment=QUALITY, files=["comparison.csv"], fmt="{}", unit="")
def _q_any_flips(src: Sources) -> str:
    """Whether any item flipped, between the sides or within either side ("yes"/"no"): a chart of flips is worth
    drawing only when some did."""
    f = src.csv("comparison.csv")
    cols = [c for c in ("flip_fraction", "noise_flip_reference", "noise_flip_local") if c in f.columns]
    return "yes" if (f[cols].fillna(0) > 0).any().any() else "no"
