"""The records and words a campaign's progress display shows (:mod:`offload_lab.campaigns.progress`): an experiment's
record, a step being shown, an error's first line, plurals that agree, and a notebook cell said in words."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass
class ExperimentRecord:
    """One notebook of the campaign, as the summary lists it."""

    experiment: str
    cells: int
    detail: str | None = None
    run: str | None = None
    outcome: str = "running"
    cells_done: int = 0
    seconds: float | None = None
    error: str | None = None
    started: float = field(default=0.0, repr=False)


@dataclass
class Step:
    """A count or a phase being shown: its latest value and when it started."""

    label: str
    started: float
    done: int | None = None
    total: int | None = None
    unit: str = ""
    text: str = ""
    task: Any = None

    def words(self) -> str:
        if self.total is None:
            return f"{self.label}: {self.text}"
        return f"{self.label}: {self.done}/{self.total} {self.unit}"


def first_line(text: Any) -> str:
    """An error's first line (marked when cut): the summary's one line per experiment."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return "" if not lines else lines[0] + (" \u2026" if len(lines) > 1 else "")


def brief(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"experiment": row.get("experiment"), "outcome": row.get("outcome"), "run": row.get("run"),
            "error": first_line(row["error"]) if row.get("error") else None}


def plural(n: int | float, word: str) -> str:
    """``word`` (a plural: experiments, cells, requests) as ``n`` of them reads: 1 experiment, 2 experiments."""
    return word[:-1] if n == 1 and word.endswith("s") and not word.endswith("ss") else word


def cell_words(cell: Any, index: int | None = None) -> str:
    """A cell in words for the status column: its papermill_description, else its first comment (a notebook's
    comments say what a cell does), else its place; never its source code, which says little to a reader."""
    source = str(getattr(cell, "source", "") or "")
    m = re.search(r"papermill_description=(\S+)", source)
    if m:
        return m.group(1)
    tags = (getattr(cell, "metadata", None) or {}).get("tags") or []
    if "parameters" in tags or "injected-parameters" in tags:
        return "setting the parameters"
    comments = [ln.strip().lstrip("#").strip() for ln in source.splitlines() if ln.strip().startswith("#")]
    text = next((c for c in comments if c and not c.lower().startswith(("noqa", "type:"))), None)
    if text is None:
        return f"cell {index + 1}" if index is not None else "a code cell"
    return text if len(text) <= 48 else text[:47] + "\u2026"
