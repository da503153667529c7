"""The audit of the rendered paper: every number in the PDF and the HTML must come from a claim, at its place.

* **HTML**, by structure: a number passes only inside the element that printed it, a claim's link (and then only a
  number that claim's text holds), a ``[literal]{.nocheck}`` span, or a citation; text inside inline SVG, inside
  SVG images embedded as ``data:`` URIs, and CSS ``content:`` strings are audited too. The ``#refs`` div and the
  appendix section (found by their ids from the prepared paper) are skipped.
* **PDF**, which keeps no structure, by count: a number passes as many times as the claims and ``.nocheck`` spans
  of the prepared paper print it (``places.json``), and no more. The references and the appendix are skipped from
  the first of their headings that follows the last heading of the body: by position, never by a name alone.

Everywhere: "Figure N" / "Table N", page numbers, and leftover ``{{<``, ``?@`` and ``?claim`` markers always fail.
"""

from __future__ import annotations

import base64
import html.parser
import json
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from offload_lab.core.errors import AuditError, InputError
from offload_lab.paper.claims import ClaimSet
from offload_lab.paper.lint import AuditReport, Finding, lint_source
from offload_lab.paper.qmd import (
    GENERATED,
    NUMBER_RE,
    default_repo_root,
    number_token,
    numbers_in,
    paper_sources,
)

PLACES = "places.json"
MARKERS = ("{{<", "?@", "?claim")

_CROSSREFS = re.compile(r"\b(?:Figure|Fig\.|Table|Section|Appendix|Equation|Eq\.)\s+\d+(?:\.\d+)*")
# A cross-reference the PDF's line breaking split: "(Table" ends one line and "3, Figure 10)" starts the next.
_CROSSREF_WORD_AT_END = re.compile(r"\b(?:Figure|Fig\.|Table|Section|Appendix|Equation|Eq\.)\s*$")
_NUMBER_AT_START = re.compile(r"^\s*\d+(?:\.\d+)*")
# A citation the PDF's line breaking split after its authors: "(Cobbe et al." ends one line, "2021)" starts the next.
_CITATION_AT_END = re.compile(r"(?:\bet\s+al\.|\([A-Z][\w'’\-]+(?:\s+and\s+[A-Z][\w'’\-]+)?),?\s*$")
_YEAR_AT_START = re.compile(r"^\s*(?:19|20)\d{2}[a-z]?(?=[);,])")
_CITATIONS = [
    # author-date citations: "Kwon et al. 2023", "(Kwon and Li 2023a)"
    re.compile(r"[A-Z][\w'’\-]+(?:\s+et\s+al\.|\s+and\s+[A-Z][\w'’\-]+)?,?\s+\(?(?:19|20)\d{2}[a-z]?\b"),
    re.compile(r"\[\d+(?:\s*[,–-]\s*\d+)*\]"),  # numeric citations
    # the same citation when the PDF's line breaks between the name and "et al.": "et al. 2023)"
    re.compile(r"(?:^|\s)et\s+al\.,?\s+(?:19|20)\d{2}[a-z]?\)"),
    # ... or between "et" and "al.": "(Zhou et" | "al. 2023) and HumanEval" (issue 30, seen in Quarto's PDF)
    re.compile(r"^\s*al\.,?\s+(?:19|20)\d{2}[a-z]?\)"),
]


def _blank(text: str, patterns: Iterable[re.Pattern[str]]) -> str:
    for rx in patterns:
        text = rx.sub(lambda m: " " * len(m.group(0)), text)
    return text


@dataclass
class Places:
    """What prepare recorded about the paper it expanded (see pandoc_ast.paper_places)."""

    numbers: dict[str, int] = field(default_factory=dict)
    headings: list[str] = field(default_factory=list)
    references: dict[str, str] | None = None
    appendix: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> Places:
        if not path.is_file():
            raise InputError(f"{path}: missing; `offload-lab paper prepare` (or `paper build`) writes it next to "
                             "claims.json")
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            return cls(numbers={str(k): int(v) for k, v in d["numbers"].items()}, headings=list(d["headings"]),
                       references=d.get("references"), appendix=list(d.get("appendix") or []))
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise InputError(f"{path}: not a places file written by paper prepare ({e}); prepare the paper again") from e

    def skipped_ids(self) -> set[str]:
        ids = {"refs"} | {a["id"] for a in self.appendix if a.get("id")}
        return ids

    def tail_headings(self) -> list[str]:
        return ([self.references["text"]] if self.references else []) + [a["text"] for a in self.appendix]


def _claim_tokens(claims: ClaimSet) -> dict[str, set[str]]:
    return {name: set(numbers_in(c.text or "")) for name, c in claims.claims.items() if c.status == "ok"}


# --------------------------------------------------------------------------------------------------------------------
# PDF
# --------------------------------------------------------------------------------------------------------------------


def pdf_lines(pdf: Path) -> list[tuple[str, str]]:
    from pypdf import PdfReader

    out = []
    for i, page in enumerate(PdfReader(str(pdf)).pages, start=1):
        lines = [ln for ln in (page.extract_text() or "").splitlines() if ln.strip()]
        for j, ln in enumerate(lines):
            # The page number, alone on the first or last line of its page.
            if ln.strip() == str(i) and (j == 0 or j == len(lines) - 1):
                continue
            out.append((f"{Path(pdf).name} page {i}", ln))
    return out


def _is_heading(line: str, heading: str) -> bool:
    # Typst may number a heading ("3.2 Boots"); nothing else may stand on its line.
    return re.fullmatch(r"\s*(?:\d+(?:\.\d+)*\.?\s+)?" + re.escape(heading.strip()) + r"\s*", line) is not None


def tail_start(lines: list[tuple[str, str]], places: Places) -> int:
    """The index of the line where the references (or the appendix) begin: the first line holding one of their
    headings after the last line holding the body's last heading; ``len(lines)`` when there is none."""
    start = 0
    if places.headings:
        last = places.headings[-1]
        hits = [i for i, (_, text) in enumerate(lines) if _is_heading(text, last)]
        if not hits:
            return len(lines)
        start = hits[-1] + 1
    for i in range(start, len(lines)):
        if any(_is_heading(lines[i][1], h) for h in places.tail_headings()):
            return i
    return len(lines)


def audit_pdf(pdf: Path, places: Places, findings: list[Finding]) -> None:
    lines = pdf_lines(pdf)
    end = tail_start(lines, places)
    budget = dict(places.numbers)
    for i, (where, text) in enumerate(lines):
        findings += [Finding(where, m, text.strip()[:100]) for m in MARKERS if m in text]
        if i >= end:
            continue
        masked = _blank(text, [_CROSSREFS, *_CITATIONS])
        if i and _CROSSREF_WORD_AT_END.search(lines[i - 1][1]):
            masked = _blank(masked, [_NUMBER_AT_START])
        if i and _CITATION_AT_END.search(lines[i - 1][1]):  # "(Cobbe et al." | "2021), IFEval ..."
            masked = _blank(masked, [_YEAR_AT_START])
        for m in NUMBER_RE.finditer(masked):
            token = number_token(m.group(0))
            if budget.get(token, 0) > 0:
                budget[token] -= 1
            else:
                findings.append(Finding(where, m.group(0), text.strip()[:100]))


# --------------------------------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------------------------------

_CSS_CONTENT = re.compile(r"content\s*:\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')", re.IGNORECASE)
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
_BLOCKS = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "td", "th", "figcaption", "br", "section",
           "header", "table", "ul", "ol", "blockquote", "pre", "figure", "title", "nav", "text", "tspan", "desc"}
SKIP, NOCHECK, CITE, ATTRIBUTE = "skip", "nocheck", "cite", "attribute"  # contexts; "claim:NAME" is the fifth
# Attributes whose text a reader sees: alternative text, tooltips, labels.
TEXT_ATTRIBUTES = ("alt", "title", "aria-label", "aria-description", "placeholder", "summary", "label")


def _names_its_target(title: str, target: str) -> bool:
    """Whether a tooltip names the file its link opens: the link may be relative from another folder (the paper built
    outside the checkout links ``../../work/main/data/...``) while the tooltip names the path from the root."""
    named = re.findall(r"(\S+\.[A-Za-z0-9]+)(?: sha256 [0-9a-f]{12,64})?", title)
    return target in title or any(target.endswith(n) or n.endswith(target) for n in named if "/" in n)


def _data_uri(uri: str, mime: str) -> str | None:
    """The text of a ``data:`` URI of that type (base64 or percent-encoded), else None."""
    if not uri.startswith("data:" + mime):
        return None
    head, _, body = uri.partition(",")
    try:
        raw = base64.b64decode(body) if head.endswith(";base64") else urllib.parse.unquote_to_bytes(body)
        return raw.decode("utf-8", errors="replace")
    except ValueError:
        return "?undecodable data URI"


class _HTMLText(html.parser.HTMLParser):
    """Text in document order as (text, context) segments, "\\n" between blocks; CSS and embedded SVG kept apart."""

    def __init__(self, skip_ids: set[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.skip_ids = skip_ids
        self.segments: list[tuple[str, str | None]] = []
        self.css: list[str] = []
        self.images: list[str] = []  # SVG documents embedded as data: URIs
        self._stack: list[tuple[str, str | None]] = []
        self.captions: set[str] = set()  # the text of every <figcaption>, whitespace normalized
        self._caption_starts: list[int] = []

    def _ctx(self) -> str | None:
        return self._stack[-1][1] if self._stack else None

    def _attribute_text(self, tag: str, a: dict[str, str], ctx: str | None) -> None:
        # Alt text, tooltips (title=), labels: a reader sees them, so they are text like any other, each a line of
        # its own. Pandoc writes a figure's caption into its image's alt text, claims and all but without their
        # elements: an alt text found in a caption of the page is that caption, audited where it stands.
        if ctx == SKIP or tag in ("link", "meta"):
            return
        target = re.sub(r"^(?:\.\./)+", "", urllib.parse.unquote(a.get("href", "")))
        for name in TEXT_ATTRIBUTES:
            if name == "title" and target and _names_its_target(a.get(name, ""), target):
                continue  # a provenance link's tooltip: the file it links to, and its sha256
            if a.get(name, "").strip():
                self.segments += [("\n", None), (a[name].replace("\n", " "), ATTRIBUTE), ("\n", None)]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self._attribute_text(tag, a, self._ctx())
        if tag in _VOID:
            if tag == "img" and (svg := _data_uri(a.get("src", ""), "image/svg+xml")) is not None:
                self.images.append(svg)
            if tag == "link" and (css := _data_uri(a.get("href", ""), "text/css")) is not None:
                self.css.append(css)
            if tag == "br":
                self.segments.append(("\n", None))
            return
        ctx, classes = self._ctx(), a.get("class", "").split()
        if ctx != SKIP:
            if tag in ("script", "metadata") or a.get("id") in self.skip_ids or (tag == "head"):
                ctx = SKIP
            elif tag == "style":
                ctx = "css"
            elif "claim" in classes and a.get("data-claim"):
                ctx = "claim:" + a["data-claim"]
            elif "nocheck" in classes:
                ctx = NOCHECK
            elif "citation" in classes:
                ctx = CITE
        if tag in ("title", "style") and ctx == SKIP and self._stack and self._stack[-1][0] == "head":
            ctx = "css" if tag == "style" else None  # the head's title is shown; its styles are audited as CSS
        self._stack.append((tag, ctx))
        if tag == "figcaption":
            self._caption_starts.append(len(self.segments))
        if tag in _BLOCKS:
            self.segments.append(("\n", None))

    def handle_endtag(self, tag: str) -> None:
        if tag == "figcaption" and self._caption_starts:
            start = self._caption_starts.pop()
            self.captions.add("".join(t for t, ctx in self.segments[start:] if ctx != ATTRIBUTE))
        if any(t == tag for t, _ in self._stack):
            while self._stack and self._stack.pop()[0] != tag:
                pass
        if tag in _BLOCKS:
            self.segments.append(("\n", None))

    def handle_data(self, data: str) -> None:
        ctx = self._ctx()
        if ctx == "css":
            self.css.append(data)
        elif ctx != SKIP:
            self.segments.append((data.replace("\n", " "), ctx))


def _words(text: str) -> str:
    """Text as its words and numbers only: punctuation and spacing differ between a caption and its alt text."""
    return " " + " ".join(re.sub(r"[^\w%]+", " ", text).split()) + " "


def _without_caption_copies(parser: _HTMLText) -> list[tuple[str, str | None]]:
    """The parser's segments less every attribute text that repeats a caption of the page (a figure's alt text)."""
    captions = [_words(c) for c in parser.captions]

    def in_a_caption(text: str) -> bool:
        norm = _words(text)
        return bool(norm.strip()) and any(norm in caption for caption in captions)

    return [(t, ctx) for t, ctx in parser.segments if not (ctx == ATTRIBUTE and in_a_caption(t))]


def _segment_lines(segments: list[tuple[str, str | None]]) -> list[list[tuple[str, str | None]]]:
    lines: list[list[tuple[str, str | None]]] = [[]]
    for text, ctx in segments:
        parts = text.split("\n")
        for k, part in enumerate(parts):
            if k:
                lines.append([])
            if part:
                lines[-1].append((part, ctx))
    return [ln for ln in lines if "".join(t for t, _ in ln).strip()]


def _mask_citations(segs: list[tuple[str, str | None]]) -> str:
    """The line's text with citations blanked, each over the whole of its citation element: citeproc may split one
    ("(<span class=nocase>Chen et al.</span> 2021)"), and its year alone would not read as a citation."""
    out, run = [], []
    for t, ctx in [*segs, ("", None)]:
        if ctx == CITE:
            run.append(t)
            continue
        if run:
            out.append(_blank("".join(run), _CITATIONS))
            run = []
        out.append(t)
    return "".join(out)


def _audit_segments(name: str, lines: list[list[tuple[str, str | None]]], tokens: dict[str, set[str]],
                    findings: list[Finding]) -> None:
    for i, segs in enumerate(lines, 1):
        text = "".join(t for t, _ in segs)
        where, shown = f"{name} line {i}", text.strip()[:100]
        findings += [Finding(where, m, shown) for m in MARKERS if m in text]
        # Citations pass only inside a citation; "Figure N" anywhere (the captions' and cross-references' labels).
        masked = _mask_citations(segs)
        masked = _blank(masked, [_CROSSREFS])
        starts, pos = [], 0
        for t, ctx in segs:
            starts.append((pos, pos + len(t), ctx))
            pos += len(t)
        for m in NUMBER_RE.finditer(masked):
            ctx = next((c for a, b, c in starts if a <= m.start() < b and m.end() <= b), "split")
            token = number_token(m.group(0))
            if ctx == NOCHECK or (ctx or "").startswith("claim:") and token in tokens.get(ctx[6:], set()):
                continue
            findings.append(Finding(where, m.group(0), shown))


def _audit_css(name: str, css: list[str], findings: list[Finding]) -> None:
    for block in css:
        for m in _CSS_CONTENT.finditer(block):
            text = m.group(1)[1:-1]
            for n in NUMBER_RE.finditer(text):
                findings.append(Finding(f"{name} css", n.group(0), m.group(0)[:100]))
            findings += [Finding(f"{name} css", mk, m.group(0)[:100]) for mk in MARKERS if mk in text]


def _parse(text: str, skip_ids: set[str]) -> _HTMLText:
    parser = _HTMLText(skip_ids)
    parser.feed(text)
    parser.close()
    return parser


def html_lines(page: Path, skip_ids: set[str] | None = None) -> list[tuple[str, str]]:
    """The page's visible text by line (what a reader copies), for tests and messages."""
    parser = _parse(Path(page).read_text(encoding="utf-8"), skip_ids or set())
    lines = _segment_lines(parser.segments)
    return [(f"{Path(page).name} line {i}", "".join(t for t, _ in ln)) for i, ln in enumerate(lines, 1)]


def audit_html(page: Path, claims: ClaimSet, places: Places, findings: list[Finding]) -> None:
    try:
        text = Path(page).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{page}: not UTF-8 text ({e}); render the paper again") from e
    parser = _parse(text, places.skipped_ids())
    tokens = _claim_tokens(claims)
    _audit_segments(Path(page).name, _segment_lines(_without_caption_copies(parser)), tokens, findings)
    _audit_css(Path(page).name, parser.css, findings)
    for k, svg in enumerate(parser.images, 1):
        inner = _parse(svg, set())
        _audit_segments(f"{Path(page).name} image {k}", _segment_lines(inner.segments), {}, findings)
        _audit_css(f"{Path(page).name} image {k}", inner.css, findings)


# --------------------------------------------------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------------------------------------------------


def body_findings(pdf: Path | str | None, html: Path | str | None, claims: ClaimSet, places: Places) -> list[Finding]:
    """A paper, not a listing: no empty section, no build machine's path or run id in the body, no percentile its
    samples do not support (offload_lab.paper.audit_body)."""
    from offload_lab.paper import audit_body

    found = audit_body.percentile_findings(claims)
    if html is not None and Path(html).is_file():
        found += audit_body.html_body_findings(Path(html), places.skipped_ids())
    if pdf is not None and Path(pdf).is_file():
        lines = pdf_lines(Path(pdf))
        found += audit_body.pdf_body_findings(lines[: tail_start(lines, places)])
    return found



def _rendered_outputs(repo: Path) -> tuple[Path | None, Path | None]:
    from offload_lab.paper.quarto import article, manuscript_outputs

    outs = manuscript_outputs(repo)
    if outs.pdf is None and outs.html is None:
        raise AuditError(f"no rendered paper to audit: expected {outs.expected(article(repo))} (from "
                         f"{outs.source}); render the paper first, or pass --pdf / --html")
    return outs.pdf, outs.html


def audit(
    claims_json: Path | str | None = None,
    pdf: Path | str | None = None,
    html: Path | str | None = None,
    qmd: Iterable[Path | str] | None = None,
    repo_root: Path | str | None = None,
    lint: bool = True,
) -> AuditReport:
    """Fail (AuditError) on numerals typed into the qmd and on numbers in the rendered paper that no claim produced.

    With neither ``pdf`` nor ``html`` (Quarto's post-render hook) it audits what Quarto wrote: the files named in
    QUARTO_PROJECT_OUTPUT_FILES, else ``_manuscript/paper/index.html`` and ``_manuscript/paper/paper.pdf``, against
    ``paper/_generated/claims.json``; finding neither fails. ``places.json`` must lie next to the claims file.
    """
    repo = Path(repo_root) if repo_root is not None else default_repo_root()
    qmds = [Path(q) for q in qmd] if qmd is not None else paper_sources(repo)
    claims_path = Path(claims_json) if claims_json is not None else repo / "paper" / GENERATED / "claims.json"
    if pdf is None and html is None:
        pdf, html = _rendered_outputs(repo)
    if not claims_path.is_file():
        raise InputError(f"{claims_path}: no claims file; build or prepare the paper first")
    claims = ClaimSet.read(claims_path)
    places = Places.read(claims_path.parent / PLACES)
    report = AuditReport()
    if lint:
        report.findings += lint_source(qmds)
        report.checked += [str(q) for q in qmds]
    for path, check in ((pdf, lambda p: audit_pdf(p, places, report.findings)),
                        (html, lambda p: audit_html(p, claims, places, report.findings))):
        if path is None:
            continue
        if not Path(path).is_file():
            raise AuditError(f"{path}: the rendered paper is missing")
        check(Path(path))
        report.checked.append(str(path))
    report.findings += body_findings(pdf, html, claims, places)
    report.raise_if_failed()
    return report
