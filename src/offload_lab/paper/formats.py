"""How claims print: numbers, percentages, ratios, lists and counts in words, and table values.

One helper per kind of wording, so that every section prints the same kind of figure the same way (and plural and
list wording comes from one place).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping


def fmt_int(value: Any) -> str:
    """Thousands separated, so that 16384 reads 16,384."""
    return f"{int(round(float(value))):,}"


def fmt_pct(decimals: int = 0) -> Callable[[Any], str]:
    """A fraction as a percentage: 0.071 → 7.1% with one decimal."""
    return lambda v: f"{100 * float(v):.{decimals}f}%"


def fmt_sig(digits: int) -> Callable[[Any], str]:
    """``digits`` significant figures without exponent: a latency can be 0.004 s on a CPU toy or 12.3 s."""

    def f(value: Any) -> str:
        v = float(value)
        if v == 0:
            return "0"
        decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
        return f"{v:,.{decimals}f}"

    return f


MINUS = "\u2212"  # a true minus sign: a hyphen reads as a dash in a table


def _magnitude(inner: str | Callable[[Any], str], x: float) -> str:
    text = inner(x) if callable(inner) else inner.format(x)
    return text.lstrip("+-\u2212")  # the sign is set here, once: a formatter that signs must not sign twice


def fmt_signed(inner: str | Callable[[Any], str] = "{:,.3g}") -> Callable[[Any], str]:
    """A difference with its sign, the one place signs are set: +0.013, −1.2 (a true minus), and a figure that rounds
    to zero unsigned (0.000, 0.0%, 0), never "+0.000" or "−0.0%". ``inner`` formats the magnitude (a format string
    or a formatter); a sign it adds is dropped."""
    def f(v: Any) -> str:
        x = float(v)
        text = _magnitude(inner, abs(x))
        if not any(ch in "123456789" for ch in text):
            return text
        return ("+" if x > 0 else MINUS) + text
    return f


def fmt_signed_decimals(decimals: int) -> Callable[[Any], str]:
    """``fmt_signed`` with a fixed number of decimals: −0.018, +0.047."""
    return fmt_signed(f"{{:.{decimals}f}}")


def fmt_approx(inner: str | Callable[[Any], str], qualifier: str | None) -> Callable[[Any], str]:
    """A figure printed with its qualifier: "about 183", "at most 48%"; unqualified when ``qualifier`` is exact.

    ``qualifier`` takes the transcription's words (exact, about, at_most, range, approximate-words)."""
    words = {"about": "about ", "at_most": "at most "}.get(qualifier or "exact", "")

    def f(v: Any) -> str:
        return words + (inner(v) if callable(inner) else inner.format(v))
    return f


def fmt_as_printed(value: Any, as_published: str | None = None) -> str:
    """A published number as the source printed it: its own spelling when the transcription records one ("7.1%",
    "1,526.7"), else the shortest spelling of the number (183, not 183.0; 0.96, 1,847)."""
    if as_published:
        return as_published
    v = float(value)
    if v.is_integer():
        return f"{int(v):,}"
    return f"{v:,.10g}" if abs(v) >= 1000 else f"{v:.10g}"


def fmt_ratio(value: Any) -> str:
    return f"{float(value):.2f}×"


def table_value(columns: Iterable[str], rows: Iterable[Iterable[Any]], align: str | None = None) -> dict[str, Any]:
    """The value of a table claim: column headings, rows of printed cells, and an alignment letter per column."""
    columns = [str(c) for c in columns]
    rows = [[str(c) for c in r] for r in rows]
    align = align or "l" + "r" * (len(columns) - 1)
    if len(align) != len(columns) or any(len(r) != len(columns) for r in rows):
        raise ValueError(f"a table of {len(columns)} columns needs that many cells in every row and alignment letter")
    if not rows:
        raise ValueError("a table claim has no rows")
    return {"columns": columns, "rows": rows, "align": align}


def _pipe_cell(text: str) -> str:
    return text.replace("|", "\\|")


def pipe_separator(value: Mapping[str, Any]) -> str:
    """The separator line of a table claim's pipe table. Its dashes follow the longest text in each column: pandoc
    takes a wide pipe table's relative column widths from them."""
    longest = [max([len(str(h)), *(len(str(r[i])) for r in value["rows"])]) for i, h in enumerate(value["columns"])]
    return "|" + "|".join((":" if a in "lc" else "-") + "-" * max(3, n) + (":" if a in "rc" else "-")
                          for a, n in zip(value["align"], longest)) + "|"


def fmt_table(value: Any) -> str:
    """A pipe table, one line per row (what the paper prints in place of a table claim)."""
    cols, rows = value["columns"], value["rows"]
    sep = pipe_separator(value)
    lines = ["| " + " | ".join(_pipe_cell(c) for c in cols) + " |", sep]
    lines += ["| " + " | ".join(_pipe_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt_list_words(items: Iterable[str]) -> str:
    """["a", "b", "c"] → "a, b and c"."""
    items = [str(i) for i in items]
    if not items:
        return "none"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]




def fmt_gib(value: Any) -> str:
    return f"{float(value):,.1f}"


def fmt_billions(value: Any) -> str:
    return f"{float(value) / 1e9:,.1f}"


def words(name: str) -> str:
    """An identifier as words: ``shared_prefix`` → ``shared prefix``."""
    return str(name).replace("_", " ")


def finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


_SMALL = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def plural(n: int, word: str, words: str | None = None) -> str:
    """1 → "one boot", 3 → "three boots", 12 → "12 boots"."""
    count = _SMALL[n] if 0 <= n < len(_SMALL) else f"{n:,}"
    return f"{count} {word if n == 1 else (words or word + 's')}"


def trend_word(ratio: float, tolerance: float = 0.05) -> str:
    """A word for a longest/shortest ratio, so that prose about a direction comes from the data too."""
    if ratio > 1 + tolerance:
        return "rises"
    if ratio < 1 - tolerance:
        return "falls"
    return "barely changes"
