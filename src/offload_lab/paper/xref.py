"""Cross-references: the labels the paper's sources define, the references they make, and how a section reads.

Quarto gives a heading ``{#sec-x}`` a cross-reference label; ``@sec-x`` (also ``@Sec-x``, ``[-@sec-x]``) then
renders as "Section N" when ``number-sections`` is on, and as the section's title when it is off (quarto-cli PR
#7495; numbers as ``sectionNumber`` in ``src/resources/filters/crossref/format.lua``: the levels below the top one,
joined by dots). A label Quarto does not find prints ``?@sec-x`` with a warning. This project checks instead:

* before anything is computed (``paper build``, ``paper prepare``, ``campaign run --paper``), a reference whose
  label no source file defines is refused, naming the file and line (:func:`check_references`);
* a section that a source defines but that *this* build leaves out (its ``.choose`` variant not chosen, an
  ``.only-campaign`` block of another campaign, a ``.requires`` block with ``note="none"``) is printed as its title
  followed by "(left out of this build)", not linked, since it has no target here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from offload_lab.core.errors import InputError
from offload_lab.paper.claims import display_path

PREFIXES = ("sec-", "fig-", "tbl-")
LEFT_OUT = "left out of this build"

# A label defined in an attribute block: {#sec-x}, {#fig-x width=88%}, ::: {#tbl-x}.
_DEFINED = re.compile(r"\{[^{}]*?#((?:sec|fig|tbl)-[^\s{}]+)[^{}]*\}")
# A heading with an attribute block: "## Title {#sec-x .appendix}".
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*(\{[^{}]*\})\s*$")
# A reference as pandoc reads a citation key: "@sec-x", "-@sec-x", "@Sec-x"; trailing punctuation is not part of it.
REFERENCE = re.compile(r"(?<![\w@])-?@((?:[Ss]ec|[Ff]ig|[Tt]bl)-[\w:.#$%&+?<>~/-]*\w)")
_NOT_PROSE = [re.compile(r"\{\{\{?<.*?>\}\}\}?"), re.compile(r"`[^`]*`")]  # shortcodes and inline code


@dataclass(frozen=True)
class Label:
    label: str
    title: str  # a heading's text as written, without markup; "" for figures and tables
    where: str  # file:line


def label_key(ref: str) -> str:
    """Quarto looks a reference up with its first letter lower-cased: ``@Sec-x`` is a capitalized ``@sec-x``."""
    return ref[:1].lower() + ref[1:]


def _plain_title(text: str) -> str:
    return re.sub(r"[*_`]", "", text).strip()


def _lines(path: Path) -> Iterable[tuple[int, str, str]]:
    from offload_lab.paper.lint import prose_lines

    for lineno, raw, line in prose_lines(path):
        for rx in _NOT_PROSE:
            line = rx.sub(lambda m: " " * len(m.group(0)), line)
        yield lineno, raw, line


def defined_labels(paths: Iterable[Path]) -> dict[str, Label]:
    """Every sec-, fig- and tbl- label the files define, with a section's title; the first definition wins."""
    found: dict[str, Label] = {}
    for path in paths:
        for lineno, _, line in _lines(Path(path)):
            heading = _HEADING.match(line)
            for m in _DEFINED.finditer(line):
                title = _plain_title(heading.group(1)) if heading and m.group(0) == heading.group(2) else ""
                found.setdefault(m.group(1), Label(m.group(1), title, f"{display_path(Path(path), None)}:{lineno}"))
    return found


def references(paths: Iterable[Path]) -> list[tuple[str, str]]:
    """(label as written, file:line) for every cross-reference in the prose of the files."""
    out = []
    for path in paths:
        for lineno, _, line in _lines(Path(path)):
            out += [(m.group(1), f"{display_path(Path(path), None)}:{lineno}") for m in REFERENCE.finditer(line)]
    return out


def check_references(paths: Iterable[Path]) -> None:
    """Refuse a cross-reference whose label no file among ``paths`` defines (every source of the paper: a section
    left out of one campaign's build is still defined)."""
    paths = list(paths)
    labels = defined_labels(paths)
    broken = [(ref, where) for ref, where in references(paths) if label_key(ref) not in labels]
    if broken:
        shown = "\n  ".join(f"{where}: @{ref}" for ref, where in broken)
        raise InputError(
            f"{len(broken)} cross-reference(s) to a label that no paper source defines:\n  {shown}\n"
            "Label the heading, figure or table ({#sec-name}, {#fig-name}, ::: {#tbl-name}) or fix the reference."
        )


def section_numbers(headers: list[tuple[str, int, bool]]) -> dict[str, str]:
    """Label -> "N.M" as Quarto numbers sections: from (label, level, numbered) of the headings in order, the levels
    below the document's top level joined by dots; ``.unnumbered`` headings are neither counted nor numbered."""
    if not headers:
        return {}
    top = min(level for _, level, _ in headers)
    counts = [0] * 7
    out: dict[str, str] = {}
    for label, level, numbered in headers:
        if not numbered:
            continue
        counts[level] += 1
        counts[level + 1:] = [0] * (6 - level)
        if label:
            out[label] = ".".join(str(counts[k]) for k in range(top, level + 1))
    return out


def numbered_sections(meta: dict[str, object], quarto_config: dict[str, object]) -> bool:
    """``number-sections`` as Quarto reads it: the paper's front matter, else ``_quarto.yml`` (top level, or both
    the html and typst formats)."""
    if "number-sections" in meta:
        return bool(meta["number-sections"])
    if "number-sections" in quarto_config:
        return bool(quarto_config["number-sections"])
    formats = quarto_config.get("format") or {}
    if isinstance(formats, dict):
        values = [(formats.get(f) or {}).get("number-sections") for f in ("html", "typst")
                  if isinstance(formats.get(f), dict)]
        return bool(values) and all(bool(v) for v in values)
    return False
