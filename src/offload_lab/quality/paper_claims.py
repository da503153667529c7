"""The quality section's claims and figures, registered with the paper's registries on import.

Every value is read from the latest ``ok`` run of experiment ``quality``: ``comparison.csv`` (one row per
benchmark, written by :func:`offload_lab.quality.experiment.write_comparison`), ``comparison.json`` (the noise floor
and failure counts) and the manifest (the parameters). Importing this module is what adds them to the paper.
"""

from __future__ import annotations

from typing import Any, Callable

from ..claims import Sources, claim, fmt_int
from ..figures import figure
from . import EXPERIMENT

BENCHMARKS = ("gsm8k", "ifeval", "humaneval")
LABELS = {"gsm8k": "GSM8K", "ifeval": "IFEval", "humaneval": "HumanEval"}
CSV = "comparison.csv"
JSON = "comparison.json"


def fmt_signed(value: Any) -> str:
    # A true minus sign: Typst prints one for a hyphen before a digit, and the printed text must equal the claim's.
    return f"{float(value):+.3f}".replace("-", "\u2212")


def fmt_prop(value: Any) -> str:
    return f"{float(value):.3f}"


def fmt_pct(value: Any) -> str:
    return f"{100 * float(value):.1f}%"


def fmt_p(value: Any) -> str:
    v = float(value)
    return "1" if v >= 0.9995 else (f"{v:.3f}" if v >= 0.001 else "<0.001")


def _row(src: Sources, benchmark: str) -> Any:
    frame = src.csv(CSV)
    rows = frame[frame["benchmark"] == benchmark]
    if rows.empty:
        raise ValueError(f"{CSV} has no row for {benchmark}: the run did not compare it")
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


def _column_claim(benchmark: str, column: str) -> Callable[[Sources], Any]:
    return lambda src: _row(src, benchmark)[column]


def _noise(benchmark: str, side: str) -> Callable[[Sources], Any]:
    def f(src: Sources) -> float:
        nf = _bench(src, benchmark)["noise_floor"][side]
        if nf is None:
            raise ValueError(f"{benchmark}: the {side} side has no second replicate, so no noise floor")
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


# --- figures ------------------------------------------------------------------------------------------------------


@figure("quality_delta", experiment=EXPERIMENT, files=[CSV], size_in=(6.0, 2.4))
def quality_delta(src: Sources, ax: Any) -> None:
    """Difference in accuracy, local minus reference, per benchmark, with paired bootstrap and Newcombe intervals."""
    frame = src.csv(CSV).set_index("benchmark")
    names = [b for b in BENCHMARKS if b in frame.index]
    for y, b in enumerate(names):
        r = frame.loc[b]
        ax.plot([r["newcombe_low"], r["newcombe_high"]], [y, y], color="#9aa5b1", linewidth=1.2,
                label="Newcombe 95%" if y == 0 else None)
        ax.plot([r["ci_low"], r["ci_high"]], [y, y], color="#1f5f9e", linewidth=3.5, solid_capstyle="butt",
                label="paired bootstrap 95%" if y == 0 else None)
        ax.plot([r["delta"]], [y], marker="o", color="#0b2f52", markersize=5)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([LABELS[b] for b in names])
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("accuracy difference, local minus reference")
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize="small")


@figure("quality_flips", experiment=EXPERIMENT, files=[CSV], size_in=(6.0, 2.4))
def quality_flips(src: Sources, ax: Any) -> None:
    """Share of items whose outcome flips: between the sides, and within each side between its two replicates."""
    frame = src.csv(CSV).set_index("benchmark")
    names = [b for b in BENCHMARKS if b in frame.index]
    width = 0.26
    series = (("flip_fraction", "local vs reference", "#1f5f9e"),
              ("noise_flip_reference", "reference vs itself", "#9aa5b1"),
              ("noise_flip_local", "local vs itself", "#c9ced6"))
    for k, (col, label, color) in enumerate(series):
        values = [100 * float(frame.loc[b, col]) if col in frame.columns and frame.loc[b, col] == frame.loc[b, col]
                  else 0.0 for b in names]
        ax.bar([i + (k - 1) * width for i in range(len(names))], values, width, color=color, label=label)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([LABELS[b] for b in names])
    ax.set_ylabel("items flipped (%)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize="small")
