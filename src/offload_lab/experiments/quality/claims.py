"""The quality section's claims and figures, registered with the paper's registries on import.

Every value is read from the latest ``ok`` run of experiment ``quality``: ``comparison.csv`` (one row per
benchmark, written by :func:`offload_lab.experiments.quality.runner.write_comparison`), ``comparison.json`` (the noise floor
and failure counts) and the manifest (the parameters). Importing this module is what adds them to the paper.
"""

from __future__ import annotations

import functools

from typing import Any, Callable

from offload_lab.paper.claims import ClaimDef, NotApplicable, Sources
from offload_lab.paper.formats import fmt_int, fmt_signed_decimals
from offload_lab.paper.claims import claim as _claim
from offload_lab.quality import EXPERIMENT

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)

BENCHMARKS = ("gsm8k", "ifeval", "humaneval")
LABELS = {"gsm8k": "GSM8K", "ifeval": "IFEval", "humaneval": "HumanEval"}
CSV = "comparison.csv"
JSON = "comparison.json"
AGREEMENT = "agreement.csv"
AGREEMENT_ITEMS = "agreement_items.csv"


# Signs are set in one place (paper.formats.fmt_signed): a true minus, and no sign on a figure that rounds to zero.
fmt_signed = fmt_signed_decimals(3)


def fmt_prop(value: Any) -> str:
    return f"{float(value):.3f}"


def fmt_pct(value: Any) -> str:
    return f"{100 * float(value):.1f}%"


def fmt_p(value: Any) -> str:
    v = float(value)
    return "1" if v >= 0.9995 else (f"{v:.3f}" if v >= 0.001 else "<0.001")


NO_DIVERGENCE = "none"


def fmt_tokens(value: Any) -> str:
    # A median of token positions is a whole number or a half; "none" when no answer differs.
    if value == NO_DIVERGENCE:
        return NO_DIVERGENCE
    v = float(value)
    return f"{v:.0f}" if v == int(v) else f"{v:.1f}"


def _row(src: Sources, benchmark: str, name: str = CSV) -> Any:
    frame = src.csv(name)
    rows = frame[frame["benchmark"] == benchmark]
    if rows.empty:
        raise ValueError(f"{name} has no row for {benchmark}: the run did not compare it")
    return rows.iloc[0]


def _bench(src: Sources, benchmark: str) -> dict[str, Any]:
    doc = src.json(JSON)
    if benchmark not in doc.get("benchmarks", {}):
        raise ValueError(f"{JSON} has no {benchmark}")
    return doc["benchmarks"][benchmark]


_COLUMNS: tuple[tuple[str, str, Callable[[Any], str], str, str], ...] = (
    ("n", "n", fmt_int, "items", "Items paired (answered by both sides)"),
    ("reference_accuracy", "reference_accuracy", fmt_prop, "", "Reference side's accuracy on the paired items"),
    ("local_accuracy", "local_accuracy", fmt_prop, "", "Local side's accuracy on the paired items"),
    ("delta", "delta", fmt_signed, "", "Difference, local minus reference"),
    ("ci_low", "ci_low", fmt_signed, "", "Paired bootstrap 95% interval of the difference, lower end"),
    ("ci_high", "ci_high", fmt_signed, "", "Paired bootstrap 95% interval of the difference, upper end"),
    ("newcombe_low", "newcombe_low", fmt_signed, "", "Newcombe 95% interval of the difference, lower end"),
    ("newcombe_high", "newcombe_high", fmt_signed, "", "Newcombe 95% interval of the difference, upper end"),
    ("mcnemar_p", "mcnemar_p", fmt_p, "", "Exact McNemar p"),
    ("b", "b", fmt_int, "items", "Items only the reference got right"),
    ("c", "c", fmt_int, "items", "Items only the local side got right"),
    ("flip_fraction", "flip_fraction", fmt_pct, "", "Share of items whose outcome differs between the sides"),
    ("flip_ci_high", "flip_ci_high", fmt_pct, "", "Wilson 95% upper bound of the flip fraction"),
    ("resolvable_delta", "resolvable_delta", fmt_prop, "", "Smallest difference the item count resolves"),
)


# Greedy answers token for token (agreement.csv, offload_lab.quality.agreement).
_AGREEMENT: tuple[tuple[str, str, Callable[[Any], str], str, str], ...] = (
    ("agree_n", "n", fmt_int, "items", "Items both sides answered, compared token for token"),
    ("agree_share", "agree_share", fmt_pct, "", "Share of items whose greedy answers agree token for token"),
    ("diverged", "diverged", fmt_int, "items", "Items whose answers differ"),
    ("first_divergence_median", "first_divergence_median", fmt_tokens, "",
     "Median position of the first token at which the answers differ (0: the first generated token)"),
    ("self_agree.reference", "self_agree_reference", fmt_pct, "",
     "Share of items the reference answers identically twice (replicate 0 vs 1)"),
    ("self_agree.local", "self_agree_local", fmt_pct, "",
     "Share of items the local side answers identically twice (replicate 0 vs 1)"),
)


def _column_claim(benchmark: str, column: str, name: str = CSV) -> Callable[[Sources], Any]:
    def f(src: Sources) -> Any:
        value = _row(src, benchmark, name)[column]
        if value != value and column.startswith("first_divergence"):
            return NO_DIVERGENCE  # every answer agrees: there is no first differing token
        if value != value:  # NaN: nothing to report (a side with no second replicate)
            raise NotApplicable(f"{name}: {benchmark} has no {column}")
        return value

    return f


def _noise(benchmark: str, side: str) -> Callable[[Sources], Any]:
    def f(src: Sources) -> float:
        nf = _bench(src, benchmark)["noise_floor"][side]
        if nf is None:  # the side answered each item once: there is no noise floor to print
            raise NotApplicable(f"{benchmark}: the {side} side has no second replicate, so no noise floor")
        return float(nf["flip_fraction"])

    return f


def _failures(benchmark: str, side: str) -> Callable[[Sources], Any]:
    def f(src: Sources) -> int:
        counts = _bench(src, benchmark)["status_counts"][side]
        return int(sum(v for k, v in counts.items() if k != "ok"))

    return f


for _b in BENCHMARKS:
    for _name, _col, _fmt, _unit, _what in _COLUMNS:
        claim(f"quality.{_b}.{_name}", experiment=EXPERIMENT, files=[CSV], fmt=_fmt, unit=_unit,
              description=f"{LABELS[_b]}: {_what}")(_column_claim(_b, _col))
    for _name, _col, _fmt, _unit, _what in _AGREEMENT:
        claim(f"quality.{_b}.{_name}", experiment=EXPERIMENT, files=[AGREEMENT], fmt=_fmt, unit=_unit,
              description=f"{LABELS[_b]}: {_what}")(_column_claim(_b, _col, AGREEMENT))
    for _side in ("reference", "local"):
        claim(f"quality.{_b}.noise_flip.{_side}", experiment=EXPERIMENT, files=[JSON], fmt=fmt_pct,
              description=f"{LABELS[_b]}: flip fraction of the {_side} side against itself (replicate 0 vs 1)",
              )(_noise(_b, _side))
        claim(f"quality.{_b}.failures.{_side}", experiment=EXPERIMENT, files=[JSON], fmt=fmt_int, unit="items",
              description=f"{LABELS[_b]}: {_side} items that were not a clean answer (empty, truncated, "
                          "unparsed, timed out, API error)")(_failures(_b, _side))


@claim("quality.replicates", experiment=EXPERIMENT, files=[JSON], fmt=fmt_int, unit="replicates")
def _replicates(src: Sources) -> int:
    """Times each side answered each item (the smaller count when the sides differ)."""
    return int(min(src.json(JSON)["replicates"].values()))


@claim("quality.resamples", experiment=EXPERIMENT, files=[JSON], fmt=fmt_int, unit="resamples")
def _resamples(src: Sources) -> int:
    """Bootstrap resamples behind each interval."""
    return int(src.json(JSON)["resamples"])
