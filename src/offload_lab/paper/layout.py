"""What a reader of the rendered PDF would see wrong in its tables, read back from the PDF's glyphs.

The way :func:`offload_lab.paper.figures.legend_problems` checks a drawn figure's legends, :func:`pdf_layout_problems`
checks a built paper: no glyph printed over another (a claim key that ran past its column and over its value), no
line past the right margin, and no table cell wrapped into a tall, narrow stack of lines (a value given a sixth of the
page became a 20-line hyphenated cell). It reads the glyphs' boxes with pdfminer.six (the ``test`` extra), so it judges any PDF, whichever renderer
wrote it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A cell's lines stand this close (baseline to baseline, in font sizes); the next row of a table stands farther, by
# the cells' insets (typst-header.typ: 3.5pt above and below at 8pt is 1.6 sizes), as does the next paragraph.
LINE_PITCH = 1.45
# A stack of lines narrower than this share of the text block is a cell (or a margin note), not a paragraph.
NARROW = 0.34
# The most lines a narrow cell may take: a short phrase that wraps once or twice reads; a column of syllables does not.
MAX_CELL_LINES = 5
# Two glyphs overlap when they share this much of the narrower one's width (kerning overlaps a little).
OVERLAP = 0.35
# A justified line's glyph boxes end a few points past the margin (hanging punctuation, side bearings).
MARGIN_SLACK = 6.0
# Punctuation is kerned into its neighbour ("PagedAttention.”"): only letters, digits and signs count.
_KERNED = set(".,;:'\"’”“‘()[]")


@dataclass(frozen=True)
class _Line:
    x0: float
    x1: float
    top: float
    size: float
    text: str


@dataclass(frozen=True)
class _Glyph:
    x0: float
    x1: float
    y0: float
    y1: float
    text: str


def _page_items(layout: Any) -> tuple[list[_Line], list[_Glyph]]:
    from pdfminer.layout import LTChar, LTTextLine

    lines: list[_Line] = []
    glyphs: list[_Glyph] = []

    def walk(node: Any) -> None:
        if isinstance(node, LTTextLine):
            chars = [c for c in node if isinstance(c, LTChar)]
            if chars and node.get_text().strip():
                sizes = sorted(c.size for c in chars)
                lines.append(_Line(node.x0, node.x1, node.y1, sizes[len(sizes) // 2], node.get_text().strip()))
            glyphs.extend(_Glyph(c.x0, c.x1, c.y0, c.y1, c.get_text()) for c in chars if c.get_text().strip())
            return
        for child in getattr(node, "_objs", []) or []:
            walk(child)

    walk(layout)
    return lines, glyphs


def _overprints(glyphs: list[_Glyph]) -> list[tuple[_Glyph, _Glyph]]:
    """Pairs of glyphs on one line whose boxes overlap: text set over other text."""
    rows: dict[int, list[_Glyph]] = defaultdict(list)
    for g in glyphs:
        rows[round((g.y0 + g.y1) / 4)].append(g)  # 2 pt bands of the glyph's middle
    found = []
    for band in rows.values():
        band.sort(key=lambda g: g.x0)
        for a, b in zip(band, band[1:]):
            narrower = min(a.x1 - a.x0, b.x1 - b.x0)
            vertical = min(a.y1, b.y1) - max(a.y0, b.y0)
            if a.text in _KERNED or b.text in _KERNED:
                continue
            if narrower > 0 and a.x1 - b.x0 > OVERLAP * narrower and vertical > 0.5 * min(a.y1 - a.y0, b.y1 - b.y0):
                found.append((a, b))
    return found


def _tall_cells(lines: list[_Line], max_lines: int) -> list[list[_Line]]:
    """Stacks of more than ``max_lines`` narrow lines that start at one x and follow at a line's pitch: one cell."""
    if not lines:
        return []
    block = max(ln.x1 for ln in lines) - min(ln.x0 for ln in lines)
    columns: dict[int, list[_Line]] = defaultdict(list)
    for ln in lines:
        if ln.x1 - ln.x0 <= NARROW * block:
            columns[round(ln.x0)].append(ln)
    tall = []
    for column in columns.values():
        column.sort(key=lambda ln: -ln.top)
        stack = [column[0]]
        for ln in column[1:]:
            if stack[-1].top - ln.top <= LINE_PITCH * max(ln.size, stack[-1].size):
                stack.append(ln)
                continue
            if len(stack) > max_lines:
                tall.append(stack)
            stack = [ln]
        if len(stack) > max_lines:
            tall.append(stack)
    return tall


def _right_edge(lines: list[_Line], page_width: float) -> float | None:
    """The text block's right edge, for a page whose side margins are equal (the paper's ``margin: x``): as far
    from the right edge as the leftmost line starts from the left."""
    return page_width - min(ln.x0 for ln in lines) if lines else None


def pdf_layout_problems(pdf: Path | str, max_cell_lines: int = MAX_CELL_LINES) -> list[str]:
    """Text printed over other text, and table cells wrapped into more than ``max_cell_lines`` narrow lines, in
    ``pdf``: one sentence per problem naming its page and text; an empty list when there is none."""
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LAParams

    problems = []
    # A small char_margin keeps two cells of a row, a column gap apart, in two lines.
    params = LAParams(char_margin=1.0, line_margin=0.2, word_margin=0.1)
    for number, layout in enumerate(extract_pages(str(pdf), laparams=params), start=1):
        lines, glyphs = _page_items(layout)
        for a, b in _overprints(glyphs)[:3]:
            near = " ".join(ln.text for ln in lines if ln.x0 - 1 <= a.x0 <= ln.x1 + 1 and ln.top >= a.y0 >= ln.top
                            - 2 * ln.size)[:80]
            problems.append(f"page {number}: {a.text!r} and {b.text!r} are printed over each other (in {near!r})")
        edge = _right_edge(lines, layout.width)
        past = [ln for ln in lines if edge is not None and ln.x1 > edge + MARGIN_SLACK]
        for ln in past[:3]:
            problems.append(f"page {number}: {ln.text[:60]!r} runs {ln.x1 - edge:.0f} pt past the right margin")
        for stack in _tall_cells(lines, max_cell_lines):
            text = " ".join(ln.text for ln in stack)
            problems.append(f"page {number}: a cell wraps into {len(stack)} narrow lines: {text[:60]!r}…")
    return problems
