"""Checks of the paper's body beyond its numbers (issue 33): a paper, not a listing, and nothing that depends on the
machine that built it.

* **No empty section**: every section of the HTML has something besides its heading (a section whose experiment
  did not run is left out whole, or keeps a note saying so).
* **No text from the build machine**: the body never names ``../shared`` (material beside the checkout that users do
  not have) and never prints a run id (``20261202T025945Z-f64a7b``): runs, files and hashes are the supplement's.
* **No percentile beyond its sample count**: a table that prints a percentile beside the number of samples it came
  from prints it only where :func:`offload_lab.core.stats.supports` allows (p95 from 20 samples, p99 from 100).

The appendix sections and the references (the ids the audit skips) are not the body; the supplement, all appendix,
holds the listings.
"""

from __future__ import annotations

import html.parser
import re
from pathlib import Path
from typing import Any

from offload_lab.core.stats import supports
from offload_lab.paper.claims import ClaimSet
from offload_lab.paper.lint import Finding

RUN_ID = re.compile(r"\b\d{8}T\d{6}Z-[0-9a-f]{4,8}\b")
MACHINE_PATHS = ("../shared",)
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_CONTENT_TAGS = {"img", "svg", "table", "figure", "pre", "video", "iframe", "object"}
_PERCENTILE = re.compile(r"\bp\s?(\d{1,2}(?:\.\d+)?)\b", re.IGNORECASE)
_COUNT = re.compile(r"^(n|samples|requests|count|items)\b", re.IGNORECASE)


class _Sections(html.parser.HTMLParser):
    """Each <section>'s heading and whether anything else is in it; the body's text, apart."""

    def __init__(self, skip_ids: set[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.skip_ids = skip_ids
        self.open: list[dict[str, Any]] = []  # sections, innermost last
        self.empty: list[str] = []
        self.text: list[str] = []
        self._skip = 0  # depth inside skipped elements (appendix, references, scripts)
        self._stack: list[tuple[str, bool]] = []  # (tag, opened a skip)
        self._heading = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        skip = tag in ("script", "style", "head") or a.get("id") in self.skip_ids
        if tag not in ("br", "img", "meta", "link", "hr", "input"):
            self._stack.append((tag, skip))
        if skip and not self._skip and a.get("id") in self.skip_ids:
            self._mark()  # the references' list, an appendix inside a section: content the audit does not read
        if skip:
            self._skip += 1
        if self._skip:
            return
        if tag == "section":
            self.open.append({"heading": "", "content": False})
        elif tag in _HEADINGS:
            self._heading += 1
        elif tag in _CONTENT_TAGS:
            self._mark()

    def handle_endtag(self, tag: str) -> None:
        if not any(t == tag for t, _ in self._stack):
            return
        while self._stack:
            t, skip = self._stack.pop()
            if skip:
                self._skip -= 1
            elif not self._skip:
                if t == "section" and self.open:
                    s = self.open.pop()
                    if not s["content"]:
                        self.empty.append(s["heading"].strip() or "(untitled)")
                    elif self.open:
                        self.open[-1]["content"] = True
                elif t in _HEADINGS:
                    self._heading -= 1
            if t == tag:
                break

    def _mark(self) -> None:
        for s in self.open:
            s["content"] = True

    def handle_data(self, data: str) -> None:
        if self._skip or not data.strip():
            return
        self.text.append(data)
        if self._heading and self.open:
            self.open[-1]["heading"] += data
        else:
            self._mark()


def html_body_findings(page: Path, skip_ids: set[str]) -> list[Finding]:
    parser = _Sections(skip_ids)
    parser.feed(Path(page).read_text(encoding="utf-8"))
    parser.close()
    name = Path(page).name
    out = [Finding(name, h, "an empty section: it has nothing but its heading") for h in parser.empty]
    out += _text_findings(name, " ".join(" ".join(parser.text).split()))
    return out


def pdf_body_findings(lines: list[tuple[str, str]]) -> list[Finding]:
    """``lines``: the PDF's lines before its references and appendix."""
    out: list[Finding] = []
    for where, text in lines:
        out += _text_findings(where, text)
    return out


def _text_findings(where: str, text: str) -> list[Finding]:
    out = [Finding(where, p, "a path that only the machine that built the paper has") for p in MACHINE_PATHS
           if p in text]
    out += [Finding(where, m.group(0), "a run id in the body: runs are listed in the supplement")
            for m in RUN_ID.finditer(text)]
    return out


def percentile_findings(claims: ClaimSet, printed: set[str] | None = None) -> list[Finding]:
    """Table claims (of those printed, when ``printed`` is given) that print a percentile beside a sample count too
    small to support it."""
    out: list[Finding] = []
    for c in claims.claims.values():
        if c.status != "ok" or c.kind != "table" or not isinstance(c.value, dict):
            continue
        if printed is not None and c.name not in printed:
            continue
        cols = [str(x) for x in c.value.get("columns") or []]
        counts = [i for i, h in enumerate(cols) if _COUNT.match(h.strip())]
        tails = [(i, float(m.group(1))) for i, h in enumerate(cols) if (m := _PERCENTILE.search(h))]
        if not counts or not tails:
            continue
        for row in c.value.get("rows") or []:
            try:
                n = int(float(str(row[counts[0]]).replace(",", "")))
            except (ValueError, IndexError):
                continue
            for i, q in tails:
                cell = str(row[i]).strip() if i < len(row) else ""
                if cell not in ("", "—", "–", "-", "None", "nan") and not supports(q, n):
                    out.append(Finding(f"claim {c.name}", cell,
                                       f"a p{q:g} from {n} samples (core.stats.supports: too few to print)"))
    return out
