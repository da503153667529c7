"""The source lint: numerals typed into the prose of paper/*.qmd, and the records every check reports with."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from offload_lab.core.errors import AuditError
from offload_lab.paper.claims import display_path
from offload_lab.paper.source import NUMBER_RE, read_qmd


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


def _mask(line: str) -> str:
    for rx in _MASKS:
        line = rx.sub(lambda m: " " * len(m.group(0)), line)
    return line


def prose_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, the line as written, the line without its comments) of every line of prose in a qmd file:
    outside its front matter, fenced code and HTML comments."""
    qmd = read_qmd(path)
    fence: str | None = None
    in_comment = False
    for i, raw in enumerate(qmd.lines):
        lineno = qmd.first_line + i
        stripped = raw.strip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            continue
        m = re.match(r"^(`{3,}|~{3,})", stripped)
        if m:
            fence = m.group(1)
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
            line = _mask(line)
            if line.lstrip().startswith(":::"):
                continue
            for n in NUMBER_RE.finditer(line):
                findings.append(Finding(f"{display_path(path, None)}:{lineno}", n.group(0), raw.strip()[:100]))
    return findings


def check_source(paths: Iterable[Path]) -> None:
    """Numbers typed into the prose (AuditError, exit 6); ``build.check_sources`` also checks cross-references."""
    paths = list(paths)
    report = AuditReport(checked=[str(p) for p in paths], findings=lint_source(paths))
    report.raise_if_failed()

