"""``offload-lab memory-math`` as a library call: the recomputed weight sizes of :mod:`offload_lab.fit.memory_math`
and, on the community page's ladder, the page's printed rows beside them (the page's transcription is read here,
in the published layer, which the fit layer may not import)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offload_lab.core.outcome import Outcome
from offload_lab.fit import memory_math as mm
from offload_lab.fit.requests import MemoryMath


@dataclass
class MemoryMathResult:
    params: float
    rows: list[dict[str, Any]]  # what --json prints
    ladder: Any
    bits_provenance: str
    printed_note: str | None  # where the printed rows come from, or why they are not beside


def memory_math(req: MemoryMath) -> MemoryMathResult:
    params = mm.parse_count(req.params)
    inputs_ = mm.memory_math_inputs()
    rows = mm.memory_math(params, req.format, inputs_, ladder=req.ladder)
    lad = inputs_.ladder(req.ladder)
    rows, note = _beside_page(params, rows, lad)
    return MemoryMathResult(params, rows, lad, inputs_.bits_provenance, note)


def _beside_page(params: float, rows: list[dict[str, Any]], lad: Any) -> tuple[list[dict[str, Any]], str | None]:
    """On the community page's ladder, set its printed rows beside the recomputed ones (when its transcription is
    here and the parameter count is the page's)."""
    from offload_lab.core import paths
    from offload_lab.published import transcription

    if lad.name != mm.PAGE_LADDER:
        return rows, None
    path = paths.resolve_in_root(mm.PAGE_TRANSCRIPTION)
    if not path.is_file():
        return rows, f"the page's printed table ({mm.PAGE_TRANSCRIPTION}) is not here: recomputed rows only"
    t = transcription.load_transcription(path)
    page_params = next(float(f.value) * 1e9 for f in t.figures if f.key == mm.PAGE_PARAMS_KEY)  # type: ignore[arg-type]
    if abs(params - page_params) > 1e-6 * page_params:
        return rows, (f"the page's printed rows are for {page_params:,.0f} parameters, not {params:,.0f}: "
                      "not compared")
    table = t.tables[mm.PAGE_TABLE]
    printed = [dict(zip(table.columns, row)) for row in table.rows]
    return mm.beside_printed(rows, printed, lad), (
        f"{mm.PAGE_TRANSCRIPTION} (source {t.source}, sha256 {t.source_sha256[:12]}…); a weight reproduces the "
        f"printed one within {100 * mm.WEIGHT_TOLERANCE:g}%")


def memory_math_outcome(req: MemoryMath) -> Outcome:
    """:func:`memory_math` as the command shows it: its rows as JSON, or a table."""
    r = memory_math(req)
    lines: list[str] = []
    write = lines.append
    lad = r.ladder
    write(f"{r.params:,.0f} parameters; weights only, before KV cache and runtime; ladder {lad.name} ({lad.unit})")
    beside = any("printed_weight_gb" in row for row in r.rows)
    write(f"  {'format':22} {'bits/weight':>11} {'weight GB':>10} {'smallest memory':>16}"
          + (f" {'printed GB':>10} {'difference':>17} {'printed smallest':>16}" if beside else ""))
    for row in r.rows:
        fit = f"{row['smallest_memory_gb']} {lad.unit}" if row["smallest_memory_gb"] else "none listed"
        bits = "–" if row["bits_per_weight"] is None else f"{row['bits_per_weight']:.2f}"
        weight = "–" if row["weight_gb"] is None else f"{row['weight_gb']:.1f}"
        line = f"  {row['format']:22} {bits:>11} {weight:>10} {fit:>16}"
        if "printed_weight_gb" in row:
            diff = ("–" if row["weight_difference_gb"] is None else
                    f"{row['weight_difference_gb']:+.1f} GB ({row['weight_difference_pct']:+.2f}%)")
            line += (f" {row['printed_weight_gb']:>10.1f} {diff:>17} {row['printed_smallest_memory_gb']:>8} "
                     f"{lad.unit} {'same' if row['smallest_memory_agrees'] else 'DIFFERS'}")
        write(line)
    write(f"  bits per weight: {r.bits_provenance}\n  memory sizes ({lad.name}): {lad.provenance}")
    if r.printed_note:
        write(f"  printed: {r.printed_note}")
    return Outcome(r.rows, lines)
