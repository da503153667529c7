"""The companion transcriptions (the study's derived figures, the community page's memory math): each figure quoted
from its source with its value in the quote, each numeral of the source in some transcription. Checked against
the source texts the package ships (offload_lab/resources/published), never ../shared."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from offload_lab.published import transcription as published

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "configs" / "published"
COMPANIONS = ("derived.yaml", "community-memory-math.yaml")


def _norm(text: str) -> str:
    # The sources print a true minus and wrap their lines; a quote may span two.
    return " ".join(text.replace("\u2212", "-").split())


def _source(name: str) -> tuple[published.Transcription, str]:
    t = published.load_transcription(PUBLISHED / name)
    src = (ROOT / t.source).resolve()
    if not src.is_file():
        pytest.skip(f"the source {src} is not on this machine")
    return t, src.read_text(encoding="utf-8")


def _spellings(v) -> set[str]:
    if isinstance(v, str):
        return {v.lower()}
    out = {f"{v:g}", f"{v:,}", f"{100 * v:g}%", f"{v:.2f}", f"{100 * v:.1f}%", f"{v:,.1f}"}
    if float(v).is_integer():
        out |= {f"{int(v):,}", str(int(v))}
        words = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
        out |= {words[int(v)]} if 0 <= v < len(words) else set()
        out |= {"first"} if v == 1 else set()
        out |= {"sixty-four"} if v == 64 else set()
        out |= {"second"} if v == 2 else set()
    if 0 < v < 1:
        out |= {f"{round(100 * v):g} cents"}  # "12 cents" for 0.12 USD
    return out


@pytest.mark.parametrize("name", COMPANIONS)
def test_every_figure_is_quoted_from_its_source_with_its_value(name):
    t, text = _source(name)
    flat = _norm(text).lower()
    headings = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert runs_sha(ROOT / t.source) == t.source_sha256
    for f in t.figures:
        for part in f.published.split(" | "):
            assert _norm(part).lower() in flat, f"{f.key}: {part!r} is not in {t.source}"
        for v in [] if f.value is None else (f.value if isinstance(f.value, list) else [f.value]):
            assert any(s in f.published.lower() for s in _spellings(v)), f"{f.key}: {v!r} not in {f.published!r}"
        assert any(f.section in h for h in headings), f"{f.key}: no section {f.section!r}"
    for tname, table in t.tables.items():
        for row in table.rows:
            for col, cell in zip(table.columns, row):
                if cell is None or col in table.labels:
                    continue
                assert any(s in flat for s in _spellings(cell)), (tname, col, cell)


def runs_sha(path: Path) -> str:
    from offload_lab.core import runs

    return runs.sha256_file(path)


# Numerals of the sources that are not figures: model names of hardware and formats, versions, the transcriber's own
# arithmetic for the weights (the paper recomputes them), and "2 bytes" of the BF16 rule.
_NOT_FIGURES = re.compile(r"Q\d_[0K]\w*|V4\.1|RTX \d+|V100|M3|DDR\d(-\d+)?|MXFP4|FP8|x16|2 bytes|× 2|"
                          r"\(that gives [^)]*\)|\d+-bit|2–3 bit|2-3 bit")


def _values(t: published.Transcription) -> tuple[set[float], str]:
    values: set[float] = set()
    quoted = " ".join(f.published for f in t.figures)
    for f in t.figures:
        for v in [] if f.value is None else (f.value if isinstance(f.value, list) else [f.value]):
            if not isinstance(v, str):
                values |= {float(v), round(100 * float(v), 6)}
    for table in t.tables.values():
        for row in table.rows:
            for cell in row:
                if isinstance(cell, (int, float)):
                    values |= {float(cell), abs(float(cell)), round(100 * float(cell), 6)}
                elif isinstance(cell, str):
                    quoted += " " + cell
    return values, quoted


@pytest.mark.parametrize("name", COMPANIONS)
def test_every_number_of_the_source_is_in_a_transcription(name):
    """Each numeral the source prints is a figure's value, or sits in a quote or cell of this transcription or of
    the study's (the derived file repeats a few of the summary's figures, which are transcribed once)."""
    _, text = _source(name)
    values, quoted = set(), ""
    for other in ("study.yaml", *COMPANIONS):
        v, q = _values(published.load_transcription(PUBLISHED / other))
        values, quoted = values | v, quoted + " " + q
    # The transcriber's notes (its arithmetic, its summary) are not the source's numbers.
    body = _NOT_FIGURES.sub(" ", published.source_words(text))
    missing = []
    for num in re.findall(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?", body):
        v = float(num.replace(",", "").replace("−", "-"))
        if v in values or abs(v) in values or num in quoted:
            continue
        missing.append(num)
    assert not missing, f"numbers of {name}'s source in no transcribed figure: {missing}"
