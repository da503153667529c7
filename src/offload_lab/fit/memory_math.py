"""The parameters x bits-per-weight calculator (``offload-lab memory-math``): weight size per GGUF format and the
smallest memory size on a named ladder that holds the weights alone.

Inputs are in ``resources/memory_math.yaml``: the bits per weight transcribed from the published summary, and the
ladders: offload-lab's own (the default: sizes memory is sold in) and the community page's (powers of two of decimal
GB, the rule its "smallest common memory size" column follows). Every result names its ladder.

The page's printed table is transcribed in ``configs/published/community-memory-math.yaml``;
:func:`beside_printed` sets each recomputed row beside the printed one (weights, their difference in GB and percent,
and whether the smallest memory agrees), since the page's printed weights are not all exactly parameters x bits / 8.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable


from offload_lab.core import inputs
from offload_lab.core.errors import InputError

UNIT_BYTES = {"GiB": 1 << 30, "GB": 10**9}
# The community page's ladder, and its printed table (a transcription, read where the repository is at hand).
PAGE_LADDER = "community-page"
PAGE_TRANSCRIPTION = "configs/published/community-memory-math.yaml"
PAGE_TABLE = "community_memory_math"
PAGE_PARAMS_KEY = "cmm_params_b"  # billions: the parameter count the printed rows are for


@dataclass(frozen=True)
class Ladder:
    name: str
    unit: str  # GiB (binary, as cards are sold) or GB (decimal)
    sizes: list[float] | None  # None: not transcribed
    provenance: str


@dataclass(frozen=True)
class MemoryMathInputs:
    bits_per_weight: dict[str, float]
    bits_provenance: str
    ladders: dict[str, Ladder]
    default_ladder: str

    def ladder(self, name: str | None = None) -> Ladder:
        name = name or self.default_ladder
        if name not in self.ladders:
            raise InputError(f"--ladder {name}: no such ladder; known: {', '.join(self.ladders)}")
        lad = self.ladders[name]
        if lad.sizes is None:
            raise InputError(f"--ladder {name}: its sizes are not transcribed yet ({lad.provenance}); use --ladder "
                             f"{self.default_ladder}")
        return lad

    # The default ladder's sizes and provenance, as the calculator had them before ladders were named.
    @property
    def memory_sizes_gb(self) -> list[float]:
        return list(self.ladder().sizes or [])

    @property
    def sizes_provenance(self) -> str:
        return self.ladder().provenance


def memory_math_inputs(path: Path | None = None) -> MemoryMathInputs:
    p = path or Path(str(resources.files("offload_lab") / "resources" / "memory_math.yaml"))
    raw = inputs.read_yaml(p, "memory-math inputs")  # the one YAML reader: bounded, duplicate keys refused
    ladders = {name: Ladder(name, str(v["unit"]), None if v.get("sizes") is None else sorted(float(x) for x in
                                                                                             v["sizes"]),
                            " ".join(str(v["provenance"]).split()))
               for name, v in raw["ladders"].items() if name != "default"}
    return MemoryMathInputs(
        bits_per_weight={k: float(v) for k, v in raw["gguf_bits_per_weight"]["formats"].items()},
        bits_provenance=" ".join(raw["gguf_bits_per_weight"]["provenance"].split()),
        ladders=ladders, default_ladder=str(raw["ladders"]["default"]))


def memory_math(params: float, formats: Iterable[str] | None = None, inputs: MemoryMathInputs | None = None,
                ladder: str | None = None) -> list[dict[str, Any]]:
    """Weight size = parameters x bits per weight / 8 for each GGUF format, and the smallest size on the ladder that
    holds the weights alone (nothing for KV cache or runtime), compared in the ladder's own unit."""
    if not params or not math.isfinite(params) or params <= 0:
        raise InputError(f"--params {params}: give a positive, finite number of parameters")
    inputs = inputs or memory_math_inputs()
    lad = inputs.ladder(ladder)
    chosen = list(formats) if formats else list(inputs.bits_per_weight)
    unknown = [f for f in chosen if f not in inputs.bits_per_weight]
    if unknown:
        raise InputError(f"--format: unknown format(s) {unknown}; known: {', '.join(inputs.bits_per_weight)}")
    rows = []
    for fmt in chosen:
        bpw = inputs.bits_per_weight[fmt]
        weight_bytes = params * bpw / 8
        rows.append({"format": fmt, "bits_per_weight": bpw, "weight_gb": weight_bytes / 1e9,
                     "smallest_memory_gb": smallest_holding(weight_bytes, lad),
                     "ladder": lad.name, "ladder_unit": lad.unit})
    return rows


def smallest_holding(weight_bytes: float, lad: Ladder) -> float | int | None:
    """The smallest size on ``lad`` (in its own unit) that holds ``weight_bytes``; None when none does."""
    unit = UNIT_BYTES[lad.unit]
    fit = next((s for s in lad.sizes or [] if s * unit >= weight_bytes), None)
    return None if fit is None else (int(fit) if float(fit).is_integer() else fit)


# How far a recomputed weight may sit from the printed one and still reproduce it: the page rounds, and says its real
# files differ slightly (some layers stay at higher precision).
WEIGHT_TOLERANCE = 0.005


def beside_printed(rows: list[dict[str, Any]], printed: list[dict[str, Any]], lad: Ladder) -> list[dict[str, Any]]:
    """Each recomputed row with the printed row of the same format beside it.

    ``printed``: the page's rows (``format``, ``bits_per_weight``, ``weight_gb``, ``smallest_memory_gb``). Adds
    ``printed_weight_gb``, ``weight_difference_gb`` and ``weight_difference_pct`` (recomputed less printed),
    ``weight_within_tolerance``, ``printed_smallest_memory_gb`` and ``smallest_memory_agrees``. A printed row with no
    bits per weight (the native release) cannot be recomputed from the parameter count: it is added with its
    smallest memory recomputed from the printed weight, which checks the ladder alone.
    """
    by_format = {str(p["format"]): p for p in printed}
    out = []
    for r in rows:
        p = by_format.get(r["format"])
        row = dict(r)
        if p is not None:
            pw = float(p["weight_gb"])
            row.update(printed_weight_gb=pw, weight_difference_gb=r["weight_gb"] - pw,
                       weight_difference_pct=100 * (r["weight_gb"] - pw) / pw,
                       weight_within_tolerance=abs(r["weight_gb"] - pw) <= WEIGHT_TOLERANCE * pw,
                       printed_smallest_memory_gb=p["smallest_memory_gb"],
                       smallest_memory_agrees=r["smallest_memory_gb"] == p["smallest_memory_gb"])
        out.append(row)
    for p in printed:
        if p.get("bits_per_weight") is None:
            pw = float(p["weight_gb"])
            fit = smallest_holding(pw * 1e9, lad)
            out.append({"format": str(p["format"]), "bits_per_weight": None, "weight_gb": None,
                        "smallest_memory_gb": fit, "ladder": lad.name, "ladder_unit": lad.unit,
                        "printed_weight_gb": pw, "weight_difference_gb": None, "weight_difference_pct": None,
                        "weight_within_tolerance": None, "printed_smallest_memory_gb": p["smallest_memory_gb"],
                        "smallest_memory_agrees": fit == p["smallest_memory_gb"],
                        "recomputed_from": "the printed weight (no bits per weight to recompute it from)"})
    return out


MAX_PARAMS = 1e15


def parse_count(text: str) -> float:
    """``763.2B``, ``35.4M``, ``7.6e11`` or a plain integer -> a number of parameters."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([kKmMbBtT]?)\s*", str(text))
    if not m:
        raise InputError(f"--params {text!r}: not a parameter count (e.g. 763.2B, 35.4M, 7.632e11)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
    value = float(m.group(1)) * scale
    # At least one parameter, at most a quadrillion (1e15: hundreds of times the largest published model).
    if not math.isfinite(value) or not 1 <= value <= MAX_PARAMS:
        raise InputError(f"--params {text!r}: give a number of parameters from 1 to {MAX_PARAMS:.0e} (e.g. 763.2B)")
    return value
