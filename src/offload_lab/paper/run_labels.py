"""Runs told apart by what differs between them, never by run id: the report and the explore notebook name runs by
the parameters (and commit, GPUs, outcome) in which an experiment's runs differ."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd


def short_run(run_id: Any) -> str:
    """``20261129T212331Z-0fb3ab`` -> ``11-29 21:23 0fb3ab``: a run id a reader can tell apart at a glance."""
    text = str(run_id)
    stamp, _, suffix = text.partition("-")
    if len(stamp) == 16 and stamp[8] == "T" and stamp.endswith("Z") and stamp[:8].isdigit():
        return f"{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]} {suffix}".strip()
    return text


# Columns that tell a run apart besides its parameters, by the name a comparison shows.
_RUN_FACTS = (("gpus", "GPUs"), ("git_commit", "commit"), ("outcome", "outcome"))


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict) and value:
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else str(value)}


def differing(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run (index ``run_id``), one column per parameter (flattened, ``regimes.short.output_tokens``) or
    run fact (GPUs, commit, outcome) whose value is not the same for every run."""
    if runs.empty:
        return pd.DataFrame()
    rows = {}
    for _, r in runs.iterrows():
        params = json.loads(r["parameters"]) if isinstance(r.get("parameters"), str) else {}
        row = _flatten(params) if params else {}
        for col, name in _RUN_FACTS:
            if col in r and pd.notna(r[col]):
                row[name] = str(r[col])[:10] if col == "git_commit" else str(r[col])
        rows[r["run_id"]] = row
    frame = pd.DataFrame.from_dict(rows, orient="index").sort_index()
    frame.index.name = "run_id"
    keep = [c for c in frame.columns if frame[c].fillna("(not set)").nunique() > 1]
    return frame[keep]


def _short(value: Any, limit: int = 40) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def run_labels(runs: pd.DataFrame, max_keys: int = 3) -> dict[str, str]:
    """Each run's name in a comparison: the parameters in which the experiment's runs differ (``streams=[1,2,4]``),
    outcome and commit last; runs that differ in nothing are named by when they started."""
    diff = differing(runs)
    starts = runs.set_index("run_id")["started_at"] if "started_at" in runs else pd.Series(dtype=object)
    facts = [name for _, name in _RUN_FACTS]
    # Parameters whose values differ among the runs that set them first (fewest unset first), then the facts
    # (commit, GPUs, outcome), then parameters that differ only in being set (a schema that grew since older runs).
    params = sorted((c for c in diff.columns if c not in facts), key=lambda c: int(diff[c].isna().sum()))
    valued = [c for c in params if diff[c].dropna().nunique() > 1]
    order = valued + [c for c in facts if c in diff.columns] + [c for c in params if c not in valued]
    labels = {}
    for run_id in runs["run_id"]:
        parts: list[str] = []
        for k in order:
            if run_id not in diff.index or pd.isna(diff.at[run_id, k]):
                continue
            part = f"{k.split('.')[-1] if k.count('.') > 1 else k}={_short(diff.at[run_id, k])}"
            if part not in parts:  # the same setting of several regimes, said once
                parts.append(part)
            if len(parts) == max_keys:
                break
        labels[run_id] = ", ".join(parts) if parts else "the one run" if len(runs) == 1 else ""
    # Runs alike in what the label shows are told apart by when they started.
    seen = pd.Series(labels).value_counts()
    for run_id, label in labels.items():
        if seen[label] > 1 or not label:
            stamp = starts.get(run_id)
            when = pd.Timestamp(stamp).strftime("%m-%d %H:%M") if pd.notna(stamp) else short_run(run_id)
            labels[run_id] = f"{label}, started {when}" if label else f"started {when}"
    return labels
