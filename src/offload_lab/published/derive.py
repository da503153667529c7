"""What the ``ref_*`` experiments share: read a campaign's ``published`` run, compute figures from it, write them.

Each ``ref_*`` experiment of the reference campaign turns one part of the published study into data. Its runner is a
``derive(pub, params)`` function that returns :class:`Derived` figures (and, where useful, tables); this module runs
it into a run directory:

===================  ===============================================================================================
``derived.json``     every derived figure: value (and range), unit, the formula in words, the published figures it
                     uses, and, where the study published the same figure, the published value and the difference
``comparison.csv``   the figures that exist on both sides: published, recomputed, difference
``<table>.csv``      any table the experiment derives
===================  ===============================================================================================

Nothing here is typed: every value is computed from the published run's files by the experiment's code, and the
manifest records which published run it read.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.published import transcription as published

DERIVED = "derived.json"
COMPARISON = "comparison.csv"


@dataclass
class Derived:
    """One figure computed from published ones."""

    key: str
    value: Any
    unit: str
    formula: str  # how it is computed, in words
    uses: list[str]  # the published figures (keys) or tables (names) it is computed from
    compares: str | None = None  # the published figure it recomputes, set side by side in the paper
    low: float | None = None  # the range an inferred or rounded input carries, when there is one
    high: float | None = None
    note: str = ""
    published: Any = None  # filled in from ``compares``
    difference: float | None = None
    # How the source printed the published value ("1,526.7", "7.1%") and its qualifier ("about"), from ``compares``.
    published_printed: str | None = None
    published_qualifier: str = "exact"

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Derivation:
    figures: list[Derived]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


Derive = Callable[[published.Published, dict[str, Any]], Derivation]


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(float(v)) else None


def compare(pub: published.Published, figures: list[Derived]) -> list[Derived]:
    """Fill in the published value and the difference (recomputed less published) of each comparing figure."""
    keys = [f.key for f in figures]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"derived figures {twice} are computed twice")
    for f in figures:
        missing = [u for u in f.uses if u not in pub.figures and not (pub.run_dir / f"{u}.csv").is_file()]
        if missing:
            raise InputError(f"derived figure {f.key} uses published figures {missing} that {pub.run_dir} lacks")
        if f.compares is not None:
            f.published = pub.value(f.compares)
            f.published_printed = pub.figures[f.compares].get("as_published")
            f.published_qualifier = pub.figures[f.compares].get("qualifier") or "exact"
        elif f.published is None:  # a figure may also be set beside a published table cell, given by its deriver
            continue
        a, b = _number(f.value), _number(f.published)
        f.difference = None if a is None or b is None else a - b
    return figures


def run_reference(run: runs.Run, data_root: Path | str, campaign: str, derive: Derive,
                  params: dict[str, Any]) -> dict[str, Any]:
    """Derive into ``run`` from the campaign's latest ok published run (``params["published_experiment"]``, by
    default ``published``); return the derived figures by key."""
    pub = published.read_published(data_root, campaign, params.get("published_experiment", published.EXPERIMENT))
    run.update(inputs_run=pub.run_ref, inputs_run_id=pub.manifest.get("run_id"))
    out = derive(pub, params)
    figures = compare(pub, out.figures)
    run.write_json(DERIVED, {"published_run": pub.run_ref, "published_run_id": pub.manifest.get("run_id"),
                             "figures": [f.record() for f in figures]})
    rows = [{"key": f.key, "compares": f.compares, "published": f.published, "recomputed": f.value,
             "difference": f.difference, "unit": f.unit} for f in figures if f.published is not None]
    run.write_table(COMPARISON, pd.DataFrame(rows, columns=["key", "compares", "published", "recomputed",
                                                            "difference", "unit"]))
    for name, table in out.tables.items():
        runs.check_name("table", name)
        run.write_table(f"{name}.csv", table)
    return {f.key: f.value for f in figures}


def figure_list(pub: published.Published, key: str) -> list[Any]:
    """A published figure that is a list (a range, team sizes, session minutes)."""
    v = pub.value(key)
    if not isinstance(v, list):
        raise InputError(f"published figure {key!r} is {v!r}, not a list")
    return v
