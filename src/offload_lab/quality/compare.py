"""Local against reference, item by item, next to each side against itself (the noise floor).

Items are paired on (benchmark, item id) at replicate 0. An item either side could not get an answer for
(``api_error``, ``timeout``) is dropped from both and counted. With two replicates per side, each side's replicate
0 against its replicate 1 gives the within-system flip fraction: temperature 0 is not deterministic (batching,
kernels), so a cross-system flip fraction means little until it is set against that. Items whose outcome differs
between the sides in both replicate pairings are listed as consistent flips, for review.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from offload_lab.quality import paired
from offload_lab.quality.runner import INFRA_FAILURES

KEY = ["benchmark", "item_id"]


def _outcomes(scores: pd.DataFrame, benchmark: str, replicate: int, column: str = "correct") -> pd.DataFrame:
    g = scores[(scores["benchmark"] == benchmark) & (scores["replicate"] == replicate)]
    return g[KEY + ["status", column]].rename(columns={column: "value"})


def _pair(ref: pd.DataFrame, loc: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    m = ref.merge(loc, on=KEY, suffixes=("_ref", "_loc"), how="inner")
    usable = ~(m["status_ref"].isin(INFRA_FAILURES) | m["status_loc"].isin(INFRA_FAILURES))
    return m[usable].reset_index(drop=True), int((~usable).sum())


def _table(m: pd.DataFrame) -> paired.Table:
    return paired.Table.from_outcomes(m["value_ref"].astype(bool).to_numpy(), m["value_loc"].astype(bool).to_numpy())


def _status_counts(scores: pd.DataFrame, benchmark: str) -> dict[str, int]:
    g = scores[(scores["benchmark"] == benchmark) & (scores["replicate"] == 0)]
    return {k: int(v) for k, v in g["status"].value_counts().sort_index().items()}


def noise_floor(scores: pd.DataFrame, benchmark: str) -> dict[str, Any] | None:
    """One side against itself: replicate 0 against replicate 1 on the same items."""
    if (scores["replicate"] == 1).sum() == 0:
        return None
    m, dropped = _pair(_outcomes(scores, benchmark, 0), _outcomes(scores, benchmark, 1))
    if m.empty:
        return None
    t = _table(m)
    lo, hi = paired.wilson(t.b + t.c, t.n)
    return {"n": t.n, "b": t.b, "c": t.c, "flips": t.b + t.c, "flip_fraction": (t.b + t.c) / t.n,
            "flip_ci_low": lo, "flip_ci_high": hi, "dropped": dropped,
            "flipped_items": m.loc[m["value_ref"].astype(bool) != m["value_loc"].astype(bool), "item_id"].tolist()}


def compare_benchmark(ref_scores: pd.DataFrame, loc_scores: pd.DataFrame, benchmark: str,
                      ifeval_instructions: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                      resamples: int = paired.DEFAULT_RESAMPLES, seed: int = 0) -> tuple[dict[str, Any], pd.DataFrame]:
    m, dropped = _pair(_outcomes(ref_scores, benchmark, 0), _outcomes(loc_scores, benchmark, 0))
    if m.empty:
        raise ValueError(f"{benchmark}: no item has an answer from both sides")
    result = paired.analyse(_table(m), resamples, seed)
    out: dict[str, Any] = {
        "benchmark": benchmark,
        "paired": result.to_json(),
        "dropped_infrastructure": dropped,
        "status_counts": {"reference": _status_counts(ref_scores, benchmark),
                          "local": _status_counts(loc_scores, benchmark)},
        "noise_floor": {"reference": noise_floor(ref_scores, benchmark), "local": noise_floor(loc_scores, benchmark)},
    }
    flips = m[m["value_ref"].astype(bool) != m["value_loc"].astype(bool)]
    # Consistent flips: the sides differ in replicate 1 as well (when both have it).
    m1, _ = _pair(_outcomes(ref_scores, benchmark, 1), _outcomes(loc_scores, benchmark, 1))
    if not m1.empty:
        f1 = set(m1.loc[m1["value_ref"].astype(bool) != m1["value_loc"].astype(bool), "item_id"])
        out["consistent_flips"] = sorted(set(flips["item_id"]) & f1)
    else:
        out["consistent_flips"] = None
    if benchmark == "ifeval":
        ml, _ = _pair(_outcomes(ref_scores, benchmark, 0, "prompt_loose"), _outcomes(loc_scores, benchmark, 0,
                                                                                      "prompt_loose"))
        out["prompt_loose"] = paired.analyse(_table(ml), resamples, seed).to_json()
        for level in ("strict", "loose"):
            out[f"inst_{level}"] = _instruction_level(ref_scores, loc_scores, m, level, resamples, seed)
    items = m.rename(columns={"value_ref": "reference_correct", "value_loc": "local_correct",
                              "status_ref": "reference_status", "status_loc": "local_status"})
    items["flip"] = items["reference_correct"].astype(bool) != items["local_correct"].astype(bool)
    return out, items


def _instruction_level(ref: pd.DataFrame, loc: pd.DataFrame, pairs: pd.DataFrame, level: str, resamples: int,
                       seed: int) -> dict[str, Any]:
    col = f"inst_{level}"
    r = ref[(ref["benchmark"] == "ifeval") & (ref["replicate"] == 0)].set_index("item_id")
    lo = loc[(loc["benchmark"] == "ifeval") & (loc["replicate"] == 0)].set_index("item_id")
    ids = pairs["item_id"].tolist()
    return paired.cluster_bootstrap(r.loc[ids, col].astype(int).tolist(), lo.loc[ids, col].astype(int).tolist(),
                                    r.loc[ids, "inst_total"].astype(int).tolist(), resamples, seed)


def compare(ref_scores: pd.DataFrame, loc_scores: pd.DataFrame, resamples: int = paired.DEFAULT_RESAMPLES,
            seed: int = 0) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """Every benchmark both sides ran: the comparison record, one summary row per benchmark, the paired items."""
    benchmarks = sorted(set(ref_scores["benchmark"]) & set(loc_scores["benchmark"]))
    if not benchmarks:
        raise ValueError("the two sides share no benchmark")
    records, rows, items = {}, [], []
    for b in benchmarks:
        rec, its = compare_benchmark(ref_scores, loc_scores, b, resamples=resamples, seed=seed)
        records[b] = rec
        items.append(its)
        p = rec["paired"]
        nf_ref, nf_loc = rec["noise_floor"]["reference"], rec["noise_floor"]["local"]
        rows.append({
            "benchmark": b, **{k: p[k] for k in ("n", "a", "b", "c", "d", "reference_accuracy", "local_accuracy",
                                                 "delta", "ci_low", "ci_high", "newcombe_low", "newcombe_high",
                                                 "mcnemar_p", "flip_fraction", "flip_ci_low", "flip_ci_high",
                                                 "resolvable_delta")},
            "dropped_infrastructure": rec["dropped_infrastructure"],
            "noise_flip_reference": nf_ref["flip_fraction"] if nf_ref else None,
            "noise_flip_local": nf_loc["flip_fraction"] if nf_loc else None,
            "consistent_flips": len(rec["consistent_flips"]) if rec["consistent_flips"] is not None else None,
        })
    return records, pd.DataFrame(rows), pd.concat(items, ignore_index=True)
