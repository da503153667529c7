"""The source lint: numerals typed into the prose of paper/*.qmd, and the records every check reports with."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from offload_lab.core.errors import AuditError, InputError
from offload_lab.paper.claims import display_path
from offload_lab.paper.qmd import GENERATED, NUMBER_RE, read_qmd


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



# --------------------------------------------------------------------------------------------------------------------
# Quarto's own rules: what `quarto render` refuses or misreads before any of our filters run. Each is ported from
# quarto-cli v1.7.34 (the source under ../shared/tools/quarto, commit facb8d49), so that a source our pandoc build
# accepts but Quarto would not is refused here, at its file and line, before any notebook runs.
# --------------------------------------------------------------------------------------------------------------------

# src/core/lib/parse-shortcode.ts isBlockShortcode: a line that starts with "{{< " and ends with " >}}" is read as
# ONE shortcode (the capture runs from the first opening to the last closing), by the include pass
# (src/core/handlers/base.ts processMarkdownIncludes), which fails the render with "Invalid Shortcode" when the
# capture does not parse, and by src/core/lib/break-quarto-md.ts, which makes it a directive cell.
QUARTO_BLOCK_SHORTCODE = re.compile(r"^\s*\{\{< (?!/\*)(.+?)(?<!\*/) >\}\}\s*$")
# src/project/types/manuscript/manuscript.ts hasComputations: a line of the article holding backticks followed by
# "{" and anything but "." makes Quarto render the article a second time as a notebook ("Article Notebook"), which
# a raw block fenced with backticks (```{=typst}) or raw inline code (`x`{=typst}) triggers.
QUARTO_CODE_HINT = re.compile(r"`+\{[^.]+.*\}")


def _quarto_shortcode(capture: str) -> tuple[str, list[str]] | None:
    """parse-shortcode.ts parseShortcodeCapture: a name, then name=value, name="v", name='v', bare or quoted values.
    (name, unnamed values), or None where Quarto throws "Invalid Shortcode"."""
    name = re.match(r"^/?[a-zA-Z0-9_]+", capture)
    if not name:
        return None
    rest, values = capture[name.end():].strip(), []
    named = re.compile(r"""^[a-zA-Z0-9_-]+=(?:"[^"]*"|'[^']*'|[^"'\s]+)""")
    value = re.compile(r"""^(?:[^"'\s]+|"[^"]*"|'[^']*')""")
    while rest:
        m = named.match(rest)
        if not m:
            m = value.match(rest)
            if not m:
                return None
            values.append(m.group(0).strip("\"'") if m.group(0)[:1] in "\"'" else m.group(0))
        rest = rest[m.end():].strip()
    return name.group(0), values


@dataclass(frozen=True)
class QuartoFinding:
    where: str  # file:line
    rule: str  # what Quarto does with the line, and what to do
    line: str

    def __str__(self) -> str:
        return f"{self.where}: {self.rule}: {self.line}"


_SEVERAL = ("Quarto reads a line that starts with {{< and ends with >}} as one shortcode (and fails on a quote "
            "inside it); reflow the text so that a word starts or ends the line")
_UNPARSED = "Quarto cannot parse this shortcode (\"Invalid Shortcode\")"
_GENERATED_INCLUDE = ("Quarto expands an include while it lists the project's inputs, before the pre-render hook "
                      "writes _generated/ (quarto-cli issue 12491), so a clean checkout fails; write "
                      "::: {.generated file=\"…\"} and ::: on the next line instead")
_CODE_CELL = ("Quarto's manuscript takes an article with this line for a notebook and renders it twice; fence a raw "
              "block with ~~~ instead of backticks, or move the line out of the article")


def quarto_findings(paths: Iterable[Path], article: Path | None = None) -> list[QuartoFinding]:
    """Lines that Quarto 1.7 would refuse or misread (see the patterns above): in every file, a line that Quarto
    takes for one block shortcode but that holds several, or one that does not parse; in ``article`` (the
    manuscript's article, which Quarto scans for code cells), a line that looks like a code cell."""
    findings = []
    for path in paths:
        where = display_path(path, None)
        is_article = article is not None and Path(path).resolve() == Path(article).resolve()
        for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            m = QUARTO_BLOCK_SHORTCODE.match(line)
            if m and ("{{<" in m.group(1) or ">}}" in m.group(1)):
                findings.append(QuartoFinding(f"{where}:{lineno}", _SEVERAL, line.strip()[:100]))
            elif m and (sc := _quarto_shortcode(m.group(1))) is None:
                findings.append(QuartoFinding(f"{where}:{lineno}", _UNPARSED, line.strip()[:100]))
            elif m and sc[0] == "include" and sc[1] and GENERATED in Path(sc[1][0]).parts:
                findings.append(QuartoFinding(f"{where}:{lineno}", _GENERATED_INCLUDE, line.strip()[:100]))
            if is_article and QUARTO_CODE_HINT.search(line):
                findings.append(QuartoFinding(f"{where}:{lineno}", _CODE_CELL, line.strip()[:100]))
    return findings


def check_quarto_rules(paths: Iterable[Path], article: Path | None = None) -> None:
    """InputError (exit 2) naming every line that Quarto 1.7 would refuse or misread, file:line."""
    found = quarto_findings(paths, article)
    if found:
        shown = "\n  ".join(str(f) for f in found[:25])
        more = f"\n  … and {len(found) - 25} more" if len(found) > 25 else ""
        raise InputError(f"{len(found)} line(s) that Quarto would refuse or misread:\n  {shown}{more}")
