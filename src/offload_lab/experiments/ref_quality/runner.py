"""Experiment ``ref_quality``: the published quality comparison (E10) as data, with intervals computed from counts.

The summary gives each benchmark's items, the difference in accuracy (local minus the vendor's API) and its interval,
and the share of items whose outcome changed; not the counts *b* (only the API right) and *c* (only the local stack
right). This experiment finds every (n, b, c) consistent with the published figures at their printed rounding (n
within ``about_window`` of a count printed "about"), and computes for each the paired bootstrap interval, Newcombe's
interval, the exact McNemar p and the flip fraction's Wilson interval with :mod:`offload_lab.quality.paired`, so that
the published intervals can be set beside intervals recomputed from counts.

Newcombe's interval also depends on how the agreeing items split into both right and both wrong, which is published
only for GSM8K; elsewhere the agreeing items are all counted as both right (the library's default), and the bootstrap
interval, which depends on n, b and c alone, is the one to compare.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.core import runs
from offload_lab.published import transcription as published
from offload_lab.published.derive import Derivation, Derived, run_reference
from offload_lab.quality import paired

EXPERIMENT = "ref_quality"
FLIPS = {"IFEval": "quality_flip_ifeval", "HumanEval": "quality_flip_humaneval"}


def _interval(printed: str) -> tuple[float, float]:
    """Values that print as ``printed`` ('4.0%', '+0.013'): half a unit of its last digit either side."""
    text = printed.strip().lstrip("+").replace("−", "-")
    scale = Decimal("0.01") if text.endswith("%") else Decimal(1)
    d = Decimal(text.rstrip("%"))
    exp = d.as_tuple().exponent
    half = Decimal(1).scaleb(exp if isinstance(exp, int) else 0) / 2
    return float((d - half) * scale), float((d + half) * scale)


def consistent_counts(n_items: int, qualifier: str, flip_printed: str | None, diff: float | None,
                      about_window: int) -> list[tuple[int, int, int]]:
    """Every (n, b, c) whose flip fraction and difference print as published."""
    ns = range(n_items - about_window, n_items + about_window + 1) if qualifier == "about" else [n_items]
    f_lo, f_hi = _interval(flip_printed) if flip_printed else (0.0, 0.0)
    d_lo, d_hi = _interval(f"{diff:+.3f}") if diff is not None else (-1.0, 1.0)
    out = []
    for n in ns:
        for k in range(n + 1):  # b + c
            if flip_printed and not f_lo <= k / n < f_hi:
                continue
            if not flip_printed and k:
                continue
            for c in range(k + 1):
                if d_lo <= (c - (k - c)) / n < d_hi or (diff is None and c == k - c):
                    out.append((n, k - c, c))
    return out


def _stats(n: int, b: int, c: int, a: int | None, resamples: int, seed: int) -> dict[str, Any]:
    t = paired.Table.from_counts(n, b, c, a)
    boot, newc, wil = paired.bootstrap(t, resamples, seed), paired.newcombe(t), paired.wilson(b + c, n)
    return {"n": n, "b": b, "c": c, "delta": (c - b) / n, "flip_fraction": (b + c) / n,
            "bootstrap_low": boot[0], "bootstrap_high": boot[1], "newcombe_low": newc[0], "newcombe_high": newc[1],
            "mcnemar_p": paired.mcnemar_exact(b, c), "flip_wilson_low": wil[0], "flip_wilson_high": wil[1]}


def derive(pub: published.Published, params: dict[str, Any]) -> Derivation:
    window, resamples, seed = int(params.get("about_window", 10)), int(params.get("resamples", 10_000)), 0
    q = pub.table("quality").set_index("benchmark")
    rows, figs = [], []
    for bench, r in q.iterrows():
        flip_key = FLIPS.get(str(bench))
        printed = pub.figures[flip_key].get("as_published") if flip_key else None
        diff = None if pd.isna(r["difference"]) else float(r["difference"])
        a = None
        if not pd.isna(r["local"]):  # GSM8K: both sides' accuracy published, every item the same outcome
            a = round(float(r["local"]) * int(r["items"]))
        for n, b, c in consistent_counts(int(r["items"]), str(r["items_qualifier"]), printed, diff, window):
            rows.append({"benchmark": bench, "published_items": int(r["items"]),
                         **_stats(n, b, c, a, resamples, seed)})
    table = pd.DataFrame(rows)
    for bench, r in q.iterrows():
        key = str(bench).lower()
        cand = table[table["benchmark"] == bench]
        exact = cand[cand["n"] == int(r["items"])]
        row = (exact if len(exact) else cand).iloc[0]
        uses = ["quality"] + ([FLIPS[str(bench)]] if str(bench) in FLIPS else [])
        figs += [
            Derived(f"{key}_candidates", int(len(cand)), "counts", "(n, b, c) consistent with the published figures",
                    uses),
            Derived(f"{key}_n", int(row["n"]), "items", "items of the first consistent count", uses),
            Derived(f"{key}_b", int(row["b"]), "items", "items only the API got right", uses),
            Derived(f"{key}_c", int(row["c"]), "items", "items only the local stack got right", uses),
            Derived(f"{key}_delta", float(row["delta"]), "difference", "(c − b) / n", uses,
                    published=None if pd.isna(r["difference"]) else float(r["difference"])),
            Derived(f"{key}_boot_low", float(row["bootstrap_low"]), "difference", "paired bootstrap, low end", uses,
                    low=float(cand["bootstrap_low"].min()), high=float(cand["bootstrap_low"].max()),
                    published=None if pd.isna(r["ci_low"]) else float(r["ci_low"])),
            Derived(f"{key}_boot_high", float(row["bootstrap_high"]), "difference", "paired bootstrap, high end",
                    uses, low=float(cand["bootstrap_high"].min()), high=float(cand["bootstrap_high"].max()),
                    published=None if pd.isna(r["ci_high"]) else float(r["ci_high"])),
            Derived(f"{key}_newcombe_low", float(row["newcombe_low"]), "difference", "Newcombe, low end", uses),
            Derived(f"{key}_newcombe_high", float(row["newcombe_high"]), "difference", "Newcombe, high end", uses),
            Derived(f"{key}_mcnemar_p", float(row["mcnemar_p"]), "p", "exact McNemar p on b and c", uses),
            Derived(f"{key}_flip", float(row["flip_fraction"]), "fraction", "(b + c) / n", uses,
                    **({"compares": FLIPS[str(bench)]} if str(bench) in FLIPS else {})),
            Derived(f"{key}_flip_wilson_high", float(row["flip_wilson_high"]), "fraction",
                    "Wilson interval of the flip fraction, high end", uses),
        ]
    figs += absolute_scores(pub, q)
    return Derivation(figs, {"consistent_counts": table})


def absolute_scores(pub: published.Published, q: pd.DataFrame) -> list[Derived]:
    """GSM8K's published accuracies (0.960 on both sides) recounted from its items, and the blog's absolute scores
    (whole percent) set against the paper's differences: each blog difference carries a point of rounding either
    way, and the paper's difference should lie inside it."""
    figs: list[Derived] = []
    g = q.loc["GSM8K"]
    if not pd.isna(g["local"]):
        n = int(g["items"])
        for side in ("local", "reference"):
            right = round(float(g[side]) * n)
            figs.append(Derived(f"gsm8k_{side}_accuracy", right / n, "accuracy",
                                f"items right on the {side} side over items, every item the same outcome",
                                ["quality"], published=float(g[side])))
    if "blog_quality" not in pub.manifest.get("files", {}) and not (pub.run_dir / "blog_quality.csv").is_file():
        return figs
    blog = pub.table("blog_quality").set_index("subset")
    for bench, r in blog.iterrows():
        key = str(bench).lower()
        diff = float(r["local"]) - float(r["vendor"])
        paper = q.loc[bench, "difference"] if bench in q.index else None
        paper = 0.0 if bench == "GSM8K" else (None if paper is None or pd.isna(paper) else float(paper))
        lo, hi = diff - 0.01, diff + 0.01  # each score rounded to a whole percent: half a point either way, twice
        figs.append(Derived(f"{key}_blog_diff", diff, "difference", "the blog's local score less the vendor's",
                            ["blog_quality"], low=lo, high=hi))
        if paper is not None:
            figs.append(Derived(f"{key}_blog_agrees", "inside" if lo <= paper <= hi else "outside", "",
                                "whether the paper's difference lies within the blog's, at its rounding",
                                ["blog_quality", "quality"]))
    return figs


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: dict[str, Any]) -> dict[str, Any]:
    return run_reference(run, data_root, campaign, derive, params)
