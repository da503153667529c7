"""From a side's raw item records to per-item outcomes and per-benchmark summaries.

Every item ends with a ``status`` and, unless the endpoint never answered, ``correct``. The status keeps failures
apart from wrong answers, worst first: ``api_error`` and ``timeout`` (no answer: left out of comparisons, item by
item on both sides), ``empty``, ``truncated`` (hit ``max_tokens``), ``parse_fail`` (GSM8K: no number found),
``exec_timeout`` (HumanEval: the tests did not finish), else ``ok``. Scores are recomputed from ``items.jsonl``;
the raw records are never edited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from offload_lab.quality import data, gsm8k, humaneval, ifeval
from offload_lab.quality.runner import INFRA_FAILURES

OUTCOME_STATUSES = ("ok", "empty", "truncated", "parse_fail", "exec_timeout", "api_error", "timeout")
PRIMARY_METRIC = {"gsm8k": "numeric answer equals the gold answer", "ifeval": "prompt-level strict",
                  "humaneval": "pass@1 (greedy): the problem's tests pass"}


def _base(rec: dict[str, Any]) -> dict[str, Any]:
    usage = rec.get("usage") or {}
    return {
        "side": rec.get("side"), "benchmark": rec["benchmark"], "item_id": str(rec["item_id"]),
        "replicate": int(rec.get("replicate", 0)), "status": rec["status"], "correct": None,
        "finish_reason": rec.get("finish_reason"), "completion_tokens": usage.get("completion_tokens"),
        "prompt_tokens": usage.get("prompt_tokens"), "retries": rec.get("retries", 0),
        "latency_s": rec.get("latency_s"),
    }


def score_records(records: Iterable[dict[str, Any]], problems: dict[str, dict[str, data.Item]],
                  exec_timeout_s: float = humaneval.DEFAULT_TIMEOUT_S) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-item outcomes and IFEval's per-instruction results."""
    rows: list[dict[str, Any]] = []
    inst_rows: list[dict[str, Any]] = []
    he_pending: list[tuple[dict[str, Any], str]] = []
    for rec in records:
        if rec.get("kind", "item") != "item":
            continue
        row = _base(rec)
        rows.append(row)
        if row["status"] in INFRA_FAILURES:
            continue
        text = rec.get("content") or ""
        item = problems[row["benchmark"]][row["item_id"]]
        if row["benchmark"] == "gsm8k":
            s = gsm8k.score(text, item.fields["gold"], truncated=row["status"] == "truncated")
            row.update(correct=s.correct, extracted=s.extracted, gold=item.fields["gold"], format_ok=s.format_ok)
            if row["status"] == "ok" and s.extracted is None:
                row["status"] = "parse_fail"
        elif row["benchmark"] == "ifeval":
            s = ifeval.score(text, item.fields["instruction_id_list"], item.fields["kwargs"])
            row.update(correct=s.prompt_strict, prompt_strict=s.prompt_strict, prompt_loose=s.prompt_loose,
                       inst_total=s.inst_total, inst_strict=s.inst_strict, inst_loose=s.inst_loose)
            for r in s.instructions:
                inst_rows.append({"side": row["side"], "item_id": row["item_id"], "replicate": row["replicate"],
                                  "instruction_id": r.instruction_id, "strict": r.strict, "loose": r.loose,
                                  "notes": "; ".join(r.notes)})
        elif row["benchmark"] == "humaneval":
            he_pending.append((row, humaneval.program(item.fields, text)))
    if he_pending:
        results = humaneval.execute_many([src for _, src in he_pending], exec_timeout_s)
        for (row, _), res in zip(he_pending, results):
            row.update(correct=res.passed, exec_outcome=res.outcome, exec_rerun=res.timed_out_first)
            if row["status"] == "ok" and res.outcome == "exec_timeout":
                row["status"] = "exec_timeout"
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values(["benchmark", "replicate", "item_id"], kind="stable").reset_index(drop=True)
    return frame, pd.DataFrame(inst_rows, columns=["side", "item_id", "replicate", "instruction_id", "strict",
                                                   "loose", "notes"])


def problems_for(benchmarks: Iterable[str], datasets: str | Path | None = None,
                 allow_download: bool = False) -> dict[str, dict[str, data.Item]]:
    return {b: {it.item_id: it for it in data.items(b, datasets, allow_download)} for b in benchmarks}


def summarize(scores: pd.DataFrame, instructions: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (benchmark, replicate): accuracy over answered items and the count of every status."""
    out = []
    if scores.empty:
        return pd.DataFrame()
    for (bench, rep), g in scores.groupby(["benchmark", "replicate"], sort=True):
        answered = g[~g["status"].isin(INFRA_FAILURES)]
        row: dict[str, Any] = {
            "benchmark": bench, "replicate": int(rep), "items": len(g), "answered": len(answered),
            "correct": int(answered["correct"].astype(bool).sum()),
            "accuracy": float(answered["correct"].astype(bool).mean()) if len(answered) else None,
            "metric": PRIMARY_METRIC[bench],
        }
        for st in OUTCOME_STATUSES:
            row[f"n_{st}"] = int((g["status"] == st).sum())
        if bench == "gsm8k" and len(answered):
            row["format_ok_rate"] = float(answered["format_ok"].astype(bool).mean())
        if bench == "ifeval" and len(answered):
            row["prompt_loose"] = float(answered["prompt_loose"].astype(bool).mean())
            row["inst_strict"] = float(answered["inst_strict"].sum() / answered["inst_total"].sum())
            row["inst_loose"] = float(answered["inst_loose"].sum() / answered["inst_total"].sum())
        out.append(row)
    return pd.DataFrame(out)
