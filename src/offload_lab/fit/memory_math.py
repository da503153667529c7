"""The parameters x bits-per-weight calculator (``offload-lab memory-math``): weight size per GGUF format and the
smallest memory size on a named ladder that holds the weights alone.

Inputs are in ``resources/memory_math.yaml``: the bits per weight transcribed from the published summary, and the
ladders. The community page's own ladder is not transcribed (the summary does not reproduce it), so the project's
ladder stays the default and asking for the page's fails with a message saying so; every result names its ladder.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import yaml

from offload_lab.core.errors import InputError

UNIT_BYTES = {"GiB": 1 << 30, "GB": 10**9}


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
    raw = yaml.safe_load(p.read_text(encoding="utf-8"))
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
    unit = UNIT_BYTES[lad.unit]
    rows = []
    for fmt in chosen:
        bpw = inputs.bits_per_weight[fmt]
        weight_bytes = params * bpw / 8
        fit = next((s for s in lad.sizes or [] if s * unit >= weight_bytes), None)
        rows.append({"format": fmt, "bits_per_weight": bpw, "weight_gb": weight_bytes / 1e9,
                     "smallest_memory_gb": None if fit is None else (int(fit) if float(fit).is_integer() else fit),
                     "ladder": lad.name, "ladder_unit": lad.unit})
    return rows


def parse_count(text: str) -> float:
    """``763.2B``, ``35.4M``, ``7.6e11`` or a plain integer -> a number of parameters."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([kKmMbBtT]?)\s*", str(text))
    if not m:
        raise InputError(f"--params {text!r}: not a parameter count (e.g. 763.2B, 35.4M, 7.632e11)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
    value = float(m.group(1)) * scale
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"--params {text!r}: give a positive, finite number of parameters")
    return value
