"""Do two servers give the same greedy answers? Token for token, item by item, beside each against itself.

Scores say little when both sides score about zero (the embedded tiny model has random weights), yet two servers
that differ only in precision (bfloat16 against float32) can still be told apart by their answers. At temperature 0
the answers of equal servers are equal token for token, so this module pairs every item's answer of one side with the
other's (replicate 0, as :mod:`offload_lab.quality.compare` pairs scores) and reports:

- the share of items whose answers agree token for token (``agree_share``), and the same for each side against itself
  (replicate 0 against replicate 1: batching and kernels make greedy decoding not quite deterministic, so this is the
  floor that a cross-server figure is read against);
- for the items that differ, the first token at which they diverge (0 is the first generated token): its median,
  smallest and largest.

The tokens are the ones the server generated (vLLM returns them with ``return_token_ids``). A backend that returns no
token ids (a vendor API) is compared on the answer text instead, and the divergence is counted in characters; the
``basis`` column says which. Items either side got no answer for (``api_error``, ``timeout``) are left out of both.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Sequence

import pandas as pd

from offload_lab.quality.runner import INFRA_FAILURES

KEY = ("benchmark", "item_id")
ITEM_COLUMNS = ["benchmark", "item_id", "basis", "identical", "first_divergence", "reference_length", "local_length"]


def answer_tokens(record: dict[str, Any]) -> tuple[str, Sequence[Any]] | None:
    """(basis, sequence) of an item record's answer: the generated token ids when the response carries them, else
    the answer's characters; None when the endpoint gave no answer."""
    if record.get("status") in INFRA_FAILURES or record.get("response") is None:
        return None
    choice = ((record.get("response") or {}).get("choices") or [{}])[0] or {}
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return "token_ids", ids
    return "text", str(record.get("content") or "")


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first position where ``a`` and ``b`` differ (the shorter one's length when one is a prefix of the
    other); None when they are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _answers(records: Iterable[dict[str, Any]], replicate: int) -> dict[tuple[str, str], tuple[str, Sequence[Any]]]:
    out = {}
    for r in records:
        if r.get("kind", "item") != "item" or int(r.get("replicate", 0)) != replicate:
            continue
        tokens = answer_tokens(r)
        if tokens is not None:
            out[(r["benchmark"], str(r["item_id"]))] = tokens
    return out


def pair_answers(reference: Iterable[dict[str, Any]], local: Iterable[dict[str, Any]], ref_replicate: int = 0,
                 loc_replicate: int = 0) -> pd.DataFrame:
    """One row per item both sides answered: identical or not, where they part, and each answer's length."""
    ref, loc = _answers(reference, ref_replicate), _answers(local, loc_replicate)
    rows = []
    for key in sorted(set(ref) & set(loc)):
        (rb, ra), (lb, la) = ref[key], loc[key]
        basis = "token_ids" if rb == lb == "token_ids" else "text"
        if basis == "text" and rb != lb:
            # One side has ids, the other only text: compare the text, which both have.
            continue
        div = first_divergence(ra, la)
        rows.append({"benchmark": key[0], "item_id": key[1], "basis": basis, "identical": div is None,
                     "first_divergence": div, "reference_length": len(ra), "local_length": len(la)})
    return pd.DataFrame(rows, columns=ITEM_COLUMNS)


def _share(items: pd.DataFrame) -> float | None:
    return float(items["identical"].mean()) if len(items) else None


SUMMARY_COLUMNS = ["benchmark", "n", "basis", "identical", "agree_share", "diverged", "first_divergence_median",
                   "first_divergence_min", "first_divergence_max", "reference_length_median", "local_length_median",
                   "self_n_reference", "self_identical_reference", "self_agree_reference",
                   "self_n_local", "self_identical_local", "self_agree_local"]


def summarize(items: pd.DataFrame, self_reference: pd.DataFrame | None = None,
              self_local: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per benchmark: items paired, basis, identical count and share, divergence median/min/max, and each
    side's agreement with itself (None without a second replicate)."""
    rows = []
    for b, g in items.groupby("benchmark", sort=True):
        div = [int(x) for x in g.loc[~g["identical"], "first_divergence"].dropna()]
        bases = sorted(set(g["basis"]))
        row: dict[str, Any] = {
            "benchmark": b, "n": int(len(g)), "basis": bases[0] if len(bases) == 1 else "mixed",
            "identical": int(g["identical"].sum()), "agree_share": _share(g), "diverged": len(div),
            "first_divergence_median": float(statistics.median(div)) if div else None,
            "first_divergence_min": min(div) if div else None, "first_divergence_max": max(div) if div else None,
            "reference_length_median": float(g["reference_length"].median()),
            "local_length_median": float(g["local_length"].median()),
        }
        for side, frame in (("reference", self_reference), ("local", self_local)):
            own = frame[frame["benchmark"] == b] if frame is not None and len(frame) else None
            row[f"self_n_{side}"] = int(len(own)) if own is not None else None
            row[f"self_identical_{side}"] = int(own["identical"].sum()) if own is not None else None
            row[f"self_agree_{side}"] = _share(own) if own is not None else None
        rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def agreement(reference: list[dict[str, Any]], local: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-benchmark summary and the paired items, from both sides' ``items.jsonl`` records."""
    items = pair_answers(reference, local)
    floors = {}
    for side, recs in (("reference", reference), ("local", local)):
        has_second = any(int(r.get("replicate", 0)) == 1 for r in recs)
        floors[side] = pair_answers(recs, recs, 0, 1) if has_second else None
    return summarize(items, floors["reference"], floors["local"]), items
