"""The source lint: numerals typed into the prose of paper/*.qmd, and the records every check reports with."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from offload_lab.core.errors import AuditError
from offload_lab.paper.claims import display_path
from offload_lab.paper.qmd import NUMBER_RE, read_qmd


@dataclass(frozen=True)
class Finding:
    where: str  # file:line, or pdf page / html line
    number: str
    context: str

    def __str__(self) -> str:
        return f"{self.where}: {self.number!r} in “{self.context}”"


@dataclass
class AuditReport:
    checked: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def raise_if_failed(self) -> None:
        if self.findings:
            shown = "\n  ".join(str(f) for f in self.findings[:25])
            more = f"\n  … and {len(self.findings) - 25} more" if len(self.findings) > 25 else ""
            raise AuditError(
                f"the paper holds {len(self.findings)} number(s) or marker(s) that no claim produced:\n  {shown}{more}\n"
                "Write numbers through {{< claim NAME >}}, or mark a deliberate literal [like this]{.nocheck}."
            )



_MASKS = [
    re.compile(r"\{\{\{?<.*?>\}\}\}?"),  # shortcodes
    re.compile(r"\[[^\[\]]*\]\{[^{}]*\.nocheck[^{}]*\}"),  # [literal]{.nocheck}
    re.compile(r"`[^`]*`"),  # inline code
    re.compile(r"\{[^{}]*\}"),  # attributes: {#fig-x width=88%}, {.requires experiments="x"}
    re.compile(r"\]\([^)]*\)"),  # link and image targets
    re.compile(r"<https?://[^>]*>|https?://\S+"),  # URLs
    re.compile(r"@[\w:.#$%&+?<>~/-]*\w"),  # citations and cross-references
    re.compile(r"\[\^[^\]]*\]"),  # footnote references
    re.compile(r"<!--.*?-->"),  # one-line comments
    re.compile(r"^\s*\d+[.)]\s"),  # ordered-list markers
]


# Raw output is rendered text, not code: `#super[3]`{=typst} prints a 3. Its content is linted where it stands.
_RAW_INLINE = re.compile(r"`([^`]*)`\{=[A-Za-z]+\}")
# Attributes whose values a reader sees (alt text, tooltips, captions): linted, while the rest of {…} is not.
TEXT_ATTRIBUTES = ("fig-alt", "alt", "title", "fig-cap", "tbl-cap", "cap", "caption", "aria-label", "summary",
                   "lst-cap", "label")
_TEXT_ATTRIBUTE = re.compile(r"\b(?:" + "|".join(map(re.escape, TEXT_ATTRIBUTES)) + r")\s*=\s*(\"[^\"]*\"|'[^']*'|\S+)")


def _keep(line: str, keep: list[tuple[int, int]]) -> str:
    """``line`` with everything blanked except the spans in ``keep``."""
    out = [" "] * len(line)
    for a, b in keep:
        out[a:b] = line[a:b]
    return "".join(out)


def _mask(line: str) -> str:
    line = _RAW_INLINE.sub(lambda m: " " + m.group(1) + " " * (len(m.group(0)) - len(m.group(1)) - 1), line)
    for rx in _MASKS:
        if rx.pattern == r"\{[^{}]*\}":
            # An attribute block: only the values a reader sees stay.
            line = rx.sub(lambda m: _keep(m.group(0), [x.span(1) for x in _TEXT_ATTRIBUTE.finditer(m.group(0))]),
                          line)
            continue
        line = rx.sub(lambda m: " " * len(m.group(0)), line)
    return line


def prose_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, the line as written, the line without its comments) of every line of prose in a qmd file:
    outside its front matter, fenced code and HTML comments."""
    qmd = read_qmd(path)
    from offload_lab.paper.sections import heading_line

    declared = heading_line(path)  # a section fragment's heading sits in its front matter
    if declared is not None:
        yield declared[0], declared[1], declared[1]
    fence: str | None = None
    raw_format: str | None = None  # inside a raw block (```{=typst}): rendered as it stands, so linted as prose
    in_comment = False
    for i, raw in enumerate(qmd.lines):
        lineno = qmd.first_line + i
        stripped = raw.strip()
        if fence:
            if stripped.startswith(fence):
                fence = raw_format = None
            elif raw_format is not None:
                # Typst's // comments are not rendered; the rest is.
                yield lineno, raw, re.sub(r"//.*$", "", raw) if raw_format == "typst" else raw
            continue
        m = re.match(r"^(`{3,}|~{3,})\s*(?:\{=([A-Za-z]+)\})?", stripped)
        if m:
            fence, raw_format = m.group(1), m.group(2)
            continue
        line = raw
        if in_comment:
            if "-->" not in line:
                continue
            line = " " * (line.index("-->") + 3) + line[line.index("-->") + 3 :]
            in_comment = False
        line = re.sub(r"<!--.*?-->", lambda c: " " * len(c.group(0)), line)
        if "<!--" in line:
            line, in_comment = line[: line.index("<!--")], True
        yield lineno, raw, line


def lint_source(paths: Iterable[Path]) -> list[Finding]:
    """Numerals in the prose of qmd files: outside front matter, code, comments, shortcodes, labels and ``.nocheck``."""
    findings = []
    for path in paths:
        for lineno, raw, line in prose_lines(path):
            # A div's fence line (::: {.callout-note title="…"}) is linted too: _mask keeps only its visible text.
            line = _mask(line)
            for n in NUMBER_RE.finditer(line):
                findings.append(Finding(f"{display_path(path, None)}:{lineno}", n.group(0), raw.strip()[:100]))
    return findings


def check_source(paths: Iterable[Path]) -> None:
    """Numbers typed into the prose (AuditError, exit 6); ``build.check_sources`` also checks cross-references."""
    paths = list(paths)
    report = AuditReport(checked=[str(p) for p in paths], findings=lint_source(paths))
    report.raise_if_failed()

