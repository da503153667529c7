"""The paper's build: claims and figures from data, then PDF and HTML, then an audit of what was rendered.

``paper/paper.qmd`` is a Quarto manuscript (``_quarto.yml`` at the repository root). Two paths render it:

* **Quarto**, when ``quarto`` is on PATH: ``quarto render`` runs :func:`prepare` as its pre-render hook
  (``offload-lab paper prepare``) and :func:`audit` as its post-render hook (``offload-lab paper audit``); the
  ``_extensions/claim`` extension supplies the ``claim`` shortcode and the ``sections`` filter.
* **pandoc + Typst** from PyPI otherwise (CI, and every machine this was written on): the same qmd, the same
  ``sections.lua`` filter, claims substituted here, figure cross-references numbered here, then pandoc → Typst →
  PDF with the ``typst`` package and pandoc → one self-contained HTML file.

What the qmd may use, so that both paths agree: YAML front matter, headings, paragraphs, lists, pipe tables, figures
``![caption](_generated/figures/NAME.svg){#fig-x}``, table divs ``::: {#tbl-x}`` (a table claim, then its caption),
cross-references ``@fig-x`` and ``@tbl-x``, citations ``[@key]``, fenced divs ``.requires`` / ``.choose`` /
``.only-campaign`` / ``.when`` (also a ``.when`` span) / ``.callout-warning`` / ``.callout-note``, and the shortcodes
``claim``, ``include`` and ``pagebreak``. Anything else is refused by the fallback rather than rendered differently.
docs/paper.md describes the sources, the claims, the blocks, the provenance and the audit.

Not checked here, because Quarto could not be installed: that ``quarto render`` accepts ``_quarto.yml`` as written, that
Quarto resolves ``quarto.utils.resolve_path`` and ``quarto.doc.input_file`` in the extension as documented, that
the manuscript writes ``_manuscript/index.html`` and a PDF there (:func:`_render_quarto` looks for any ``*.pdf``),
that a table claim alone in a ``#tbl-`` div becomes a numbered table, and how Quarto numbers and styles callouts and
the appendix in Typst. The Lua itself runs under pandoc in the tests and in every pandoc build.
"""

from __future__ import annotations

import datetime as dt
import html.parser
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from offload_lab.core import paths, runs
from offload_lab.paper.claims import ClaimSet, ResolvedClaim, default_data_root, display_path, resolve_claims
from offload_lab.paper.formats import pipe_separator
from offload_lab.core.errors import AuditError, ClaimError, InputError, OffloadLabError
from offload_lab.paper.figures import FigureRecord, _run_dir_of, draw_figures, verify_figure

GENERATED = "_generated"
QMD = Path("paper") / "paper.qmd"
EXTENSION = Path("_extensions") / "claim"
CSS = Path("paper") / "paper.css"
TYPST_OPTIONS = ("papersize", "margin", "fontsize", "section-numbering", "mainfont", "page-numbering")
SKIPPED_SECTIONS = ("References", "Provenance")  # audited by construction, not by the number check
MARKERS = ("{{<", "?@", "?claim")

# A numeral not glued to a word: "p95", "sha256" and "H200" are names, "95th" and "10x" are numbers.
NUMBER_RE = re.compile(r"(?<![A-Za-z_\d.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
SHORTCODE_RE = re.compile(r"(?<!\{)\{\{<\s*([A-Za-z][\w-]*)((?:\s+[^\s>]+)*)\s*>\}\}(?!\})")
CROSSREF_PREFIXES = ("fig-", "tbl-", "sec-")


class RenderError(OffloadLabError):
    """pandoc, Typst or Quarto failed."""


# --------------------------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Qmd:
    path: Path
    meta: dict[str, Any]
    lines: list[str]  # the body
    first_line: int  # line number (1-based) of lines[0] in the file


@dataclass
class Prepared:
    claims: ClaimSet
    figures: dict[str, FigureRecord | None]
    generated_dir: Path
    claims_json: Path
    ast: dict[str, Any]  # the qmd as a pandoc AST, claims in, campaign filter applied, checked
    qmd: Path

    def __str__(self) -> str:
        return str(self.generated_dir)


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


@dataclass
class BuildResult:
    pdf: Path | None
    html: Path | None
    claims_json: Path
    figures: dict[str, FigureRecord | None]
    renderer: str  # "quarto" or "pandoc+typst"
    seconds: float
    audit: AuditReport
    typ: Path | None = None
    shown_figures: list[str] = field(default_factory=list)  # figures the paper shows, in order
    shown_claims: list[str] = field(default_factory=list)  # claims the paper prints (each once)
    pages: int | None = None

    def summary(self) -> str:
        """One line: pages, figures and claims of this build."""
        d = json.loads(self.claims_json.read_text(encoding="utf-8"))
        ok = sum(1 for c in d["claims"].values() if c["status"] == "ok")
        pages = f"{self.pages} pages, " if self.pages is not None else ""
        return (f"{pages}{len(self.shown_figures)} figures, {len(self.shown_claims)} claims printed "
                f"({ok} resolved, {len(d['claims']) - ok} absent), rendered by {self.renderer}")

    def outputs(self) -> dict[str, Path]:
        """What a person opens, by label (for the CLI to print)."""
        files = {"pdf": self.pdf, "html": self.html, "claims": self.claims_json, "typst source": self.typ}
        return {k: v for k, v in files.items() if v is not None}


# --------------------------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------------------------


def read_qmd(path: Path) -> Qmd:
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        for i in range(1, len(lines)):
            if lines[i].strip() in ("---", "..."):
                meta = yaml.safe_load("\n".join(lines[1:i])) or {}
                return Qmd(Path(path), meta, lines[i + 1 :], i + 2)
        raise InputError(f"{path}: the YAML front matter is not closed with ---")
    return Qmd(Path(path), {}, lines, 1)


def default_repo_root() -> Path:
    """QUARTO_PROJECT_DIR (set for Quarto's hooks), else the repository root found from the working directory."""
    env = os.environ.get("QUARTO_PROJECT_DIR")
    if env:
        return Path(env)
    return paths.find_root()


def default_out_dir(repo_root: Path, campaign: str) -> Path:
    return Path(repo_root) / "_output" / campaign


def default_campaign(repo_root: Path, qmd: Path | None = None) -> str:
    """OFFLOAD_LAB_CAMPAIGN, else ``offload-lab: campaign:`` in the qmd's front matter."""
    env = os.environ.get("OFFLOAD_LAB_CAMPAIGN")
    if env:
        return env
    meta = read_qmd(qmd or Path(repo_root) / QMD).meta
    campaign = (meta.get("offload-lab") or {}).get("campaign")
    if not campaign:
        raise InputError("no campaign: pass --campaign, set OFFLOAD_LAB_CAMPAIGN, or set offload-lab.campaign in paper.qmd")
    return str(campaign)


def _quarto_config(repo_root: Path) -> dict[str, Any]:
    p = Path(repo_root) / "_quarto.yml"
    return (yaml.safe_load(p.read_text(encoding="utf-8")) or {}) if p.is_file() else {}


# --------------------------------------------------------------------------------------------------------------------
# (a) Source lint: numerals typed into paper/*.qmd
# --------------------------------------------------------------------------------------------------------------------

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


def lint_source(paths: Iterable[Path]) -> list[Finding]:
    """Numerals in the prose of qmd files: outside front matter, code, comments, shortcodes, labels and ``.nocheck``."""
    findings = []
    for path in paths:
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
            line = _mask(line)
            if "<!--" in line:
                line, in_comment = line[: line.index("<!--")], True
            if line.lstrip().startswith(":::"):
                continue
            for n in NUMBER_RE.finditer(line):
                findings.append(Finding(f"{display_path(path, None)}:{lineno}", n.group(0), stripped[:100]))
    return findings


def check_source(paths: Iterable[Path]) -> None:
    report = AuditReport(checked=[str(p) for p in paths], findings=lint_source(paths))
    report.raise_if_failed()


def paper_sources(repo_root: Path) -> list[Path]:
    return sorted((Path(repo_root) / "paper").rglob("*.qmd"))


# --------------------------------------------------------------------------------------------------------------------
# Expansion: shortcodes to pandoc markdown
# --------------------------------------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return re.sub(r"([\\`*_{}\[\]()#+\-.!<>|~^$@'\"])", r"\\\1", text)


def _attr_value(text: str) -> str:
    return text.replace("\\", "/").replace('"', "'")


def _provenance_attrs(c: ResolvedClaim, cls: str = "claim") -> str:
    f = c.files[0]
    nb = c.notebook_output or c.notebook or ""
    return (f'.{cls} data-claim="{c.name}" data-file="{_attr_value(f.path)}" data-sha256="{f.sha256}" '
            f'data-notebook="{_attr_value(nb)}"')


def _claim_markdown(c: ResolvedClaim, where: str) -> str:
    if c.status != "ok":
        return f'[?claim:{_md_escape(c.name)}]{{.claim-absent data-claim="{c.name}" data-where="{where}"}}'
    return f"[{_md_escape(c.text or '')}]{{{_provenance_attrs(c)}}}"


def _table_markdown(c: ResolvedClaim, where: str) -> str:
    """A table claim as a pipe table whose every cell with a number is a traced claim span."""
    if c.status != "ok":
        return _claim_markdown(c, where)
    value = c.value or {}
    attrs = _provenance_attrs(c, "claim-cell")

    def cell(text: str) -> str:
        text = str(text)
        if not NUMBER_RE.search(text):
            return _md_escape(text).replace("|", "\\|")
        return f"[{_md_escape(text)}]{{{attrs}}}".replace("|", "\\|")

    sep = pipe_separator(value)
    lines = ["| " + " | ".join(_md_escape(h) for h in value["columns"]) + " |", sep]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in value["rows"]]
    return "\n" + "\n".join(lines) + "\n"


def _resolve_include(arg: str, base: Path, generated_dir: Path) -> Path:
    # The qmd names generated files as Quarto sees them (paper/_generated/...); this build may write them elsewhere.
    parts = Path(arg).parts
    if parts and parts[0] == GENERATED:
        return Path(generated_dir, *parts[1:])
    return base / arg


def expand(qmd_path: Path, claims: ClaimSet, generated_dir: Path, *, _depth: int = 0) -> str:
    """The body of a qmd with claim, include and pagebreak shortcodes replaced; unknown claims raise ClaimError."""
    qmd = read_qmd(qmd_path)
    out: list[str] = []
    for i, line in enumerate(qmd.lines):
        where = f"{qmd_path}:{qmd.first_line + i}"
        if re.match(r"^\s*(`{3,}|~{3,})\s*\{[A-Za-z]", line):
            # Executable cells would render here as plain code; values belong in claims, plots in figures.py.
            raise InputError(f"{where}: executable code cells are not supported; compute the value as a claim")
        whole = SHORTCODE_RE.fullmatch(line.strip())
        if whole and whole.group(1) == "claim":
            args = whole.group(2).split()
            if len(args) == 1 and args[0] in claims and claims[args[0]].kind == "table":
                out.append(_table_markdown(claims[args[0]], where))
                continue

        def sub(m: re.Match[str]) -> str:
            name, args = m.group(1), m.group(2).split()
            if name == "claim":
                if len(args) != 1:
                    raise ClaimError(f"{where}: a claim shortcode takes one name, got {args}")
                if args[0] not in claims:
                    raise ClaimError(f"{where}: unknown claim {args[0]!r} (defined claims live in offload_lab.paper.claims)")
                if claims[args[0]].kind == "table":
                    raise InputError(f"{where}: table claim {args[0]} must stand alone on its line")
                return _claim_markdown(claims[args[0]], where)
            if name == "pagebreak":
                return "\n```{=typst}\n#pagebreak()\n```\n"
            if name == "include":
                if _depth > 4 or len(args) != 1:
                    raise InputError(f"{where}: include takes one path (and nests at most 4 deep)")
                target = _resolve_include(args[0], qmd_path.parent, generated_dir)
                if not target.is_file():
                    raise InputError(f"{where}: included file {target} does not exist; run `offload-lab paper prepare`")
                return expand(target, claims, generated_dir, _depth=_depth + 1)
            raise InputError(f"{where}: shortcode {name!r} is not supported by the pandoc + Typst build")

        out.append(SHORTCODE_RE.sub(sub, line))
    return "\n".join(out) + "\n"


def _front_matter(qmd: Qmd, claims_json: Path, repo_root: Path) -> str:
    meta = dict(qmd.meta)
    ol = dict(meta.get("offload-lab") or {})
    ol["claims"] = str(claims_json.resolve())
    meta["offload-lab"] = ol
    if "bibliography" in meta:
        bibs = meta["bibliography"] if isinstance(meta["bibliography"], list) else [meta["bibliography"]]
        meta["bibliography"] = [str((qmd.path.parent / b).resolve()) for b in bibs]
    typst = ((_quarto_config(repo_root).get("format") or {}).get("typst")) or {}
    for key in TYPST_OPTIONS:
        if key in typst and key not in meta:
            meta[key] = typst[key]
    return "---\n" + yaml.safe_dump(meta, allow_unicode=True, sort_keys=False) + "---\n\n"


# --------------------------------------------------------------------------------------------------------------------
# pandoc and its AST
# --------------------------------------------------------------------------------------------------------------------


def _pandoc(args: list[str], stdin: str | None = None, cwd: Path | None = None) -> str:
    import pypandoc

    cmd = [pypandoc.get_pandoc_path(), *args]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise RenderError(f"pandoc {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _walk(node: Any, fn: Callable[[dict[str, Any]], Any]) -> Any:
    """Bottom-up map over a pandoc JSON AST; ``fn`` returns None (keep), an element, or a list (splice)."""
    if isinstance(node, list):
        out: list[Any] = []
        for item in node:
            r = _walk(item, fn)
            if isinstance(item, dict) and "t" in item and isinstance(r, list):
                out.extend(r)
            else:
                out.append(r)
        return out
    if isinstance(node, dict) and "t" in node:
        if "c" in node:
            node = {"t": node["t"], "c": _walk(node["c"], fn)}
        r = fn(node)
        return node if r is None else r
    return node


def _visit(node: Any, fn: Callable[[dict[str, Any]], None]) -> None:
    """Document-order visit (parents before children)."""
    if isinstance(node, list):
        for item in node:
            _visit(item, fn)
    elif isinstance(node, dict):
        if "t" in node:
            fn(node)
            _visit(node.get("c"), fn)
        else:
            for v in node.values():
                _visit(v, fn)


def _attr_of(el: dict[str, Any]) -> tuple[str, list[str], dict[str, str]] | None:
    t, c = el["t"], el.get("c")
    if t in ("Span", "Div", "Figure", "Link", "Image", "Table", "CodeBlock", "Code"):
        ident, classes, kvs = c[0]
        return ident, classes, dict(kvs)
    if t == "Header":
        ident, classes, kvs = c[1]
        return ident, classes, dict(kvs)
    return None


def _inlines(text: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, word in enumerate(text.split(" ")):
        if i:
            out.append({"t": "Space"})
        if word:
            out.append({"t": "Str", "c": word})
    return out


def _stringify(node: Any) -> str:
    parts: list[str] = []

    def fn(el: dict[str, Any]) -> None:
        if el["t"] == "Str":
            parts.append(el["c"])
        elif el["t"] in ("Space", "SoftBreak", "LineBreak", "Para", "Plain", "Header"):
            parts.append(" ")  # a block starts a new word too
        elif el["t"] == "Code":
            parts.append(el["c"][1])

    _visit(node, fn)
    return "".join(parts)


def markdown_to_ast(markdown: str, repo_root: Path) -> dict[str, Any]:
    sections = Path(repo_root) / EXTENSION / "sections.lua"
    out = _pandoc(["-f", "markdown", "-t", "json", "--lua-filter", str(sections)], stdin=markdown)
    return table_divs(json.loads(out))


def table_divs(ast: dict[str, Any]) -> dict[str, Any]:
    """Quarto's table cross-reference divs, ``::: {#tbl-x}`` holding a table and then its caption, as the captioned
    table pandoc would have made of a pipe table with ``: caption {#tbl-x}``.

    A table claim's table exists only once its shortcode is expanded, after Quarto has parsed the page, so the qmd
    captions it with such a div (which Quarto numbers natively); this gives the pandoc build the same table.
    """

    def fn(el: dict[str, Any]) -> Any:
        if el["t"] != "Div":
            return None
        ident, classes, kvs = el["c"][0]
        if not ident.startswith("tbl-"):
            return None
        blocks = el["c"][1]
        tables = [b for b in blocks if b["t"] == "Table"]
        rest = [b for b in blocks if b["t"] != "Table"]
        if len(tables) != 1 or len(rest) > 1 or (rest and rest[0]["t"] not in ("Para", "Plain")):
            raise InputError(f"::: {{#{ident}}} must hold one table and then one paragraph, its caption")
        table = tables[0]
        attr = [ident, table["c"][0][1] + classes, table["c"][0][2] + kvs]
        caption = [None, [{"t": "Plain", "c": rest[0]["c"]}]] if rest else table["c"][1]
        return {"t": "Table", "c": [attr, caption, *table["c"][2:]]}

    return {**ast, "blocks": _walk(ast["blocks"], fn)}


def check_ast(ast: dict[str, Any], claims: ClaimSet) -> None:
    """After the campaign filter: no claim left that is absent, no lost sections state."""
    problems = []

    def fn(el: dict[str, Any]) -> None:
        a = _attr_of(el)
        if el["t"] == "Span" and a:
            if "claim-absent" in a[1]:
                name = a[2].get("data-claim", "?")
                reason = claims[name].reason if name in claims else "unknown"
                problems.append(f"{a[2].get('data-where', '?')}: claim {name} is used but absent ({reason})")
            elif "claim-unknown" in a[1]:
                problems.append(f"the sections filter could not read claims.json ({_stringify(el)})")

    _visit(ast["blocks"], fn)
    if problems:
        raise ClaimError(
            "claims the paper uses cannot be resolved:\n  " + "\n  ".join(problems) + "\nPut the text in a "
            '::: {.requires experiments="..."} block, or run the experiment.'
        )


def figure_images(ast: dict[str, Any]) -> list[str]:
    found: list[str] = []
    _visit(ast["blocks"], lambda el: found.append(el["c"][2][0]) if el["t"] == "Image" else None)
    return found


def check_figures(ast: dict[str, Any], generated_dir: Path, repo_root: Path) -> list[FigureRecord]:
    """Every image the paper shows is a drawn figure whose sidecar still matches its data and its image files."""
    records = []
    for src in figure_images(ast):
        parts = Path(src).parts
        if len(parts) != 3 or parts[0] != GENERATED or parts[1] != "figures":
            raise ClaimError(
                f"image {src}: the paper shows only figures drawn from data (_generated/figures/NAME.svg, "
                "registered in offload_lab.paper.figures)"
            )
        sidecar = Path(generated_dir) / "figures" / (Path(src).stem + ".json")
        records.append(verify_figure(sidecar, repo_root))
        if not (Path(generated_dir) / "figures" / parts[2]).is_file():
            raise ClaimError(f"image {src}: not drawn (no {parts[2]} next to its sidecar)")
    return records


def number_crossrefs(ast: dict[str, Any]) -> dict[str, str]:
    """Label → "Figure N" / "Table N", in document order.

    Counts every figure and every table, labelled or not, because pandoc's Typst output wraps each in a ``figure``
    that Typst numbers; the "Figure N" in the text then agrees with the one under the figure.
    """
    labels: dict[str, str] = {}
    counts = {"Figure": 0, "Table": 0}

    def fn(el: dict[str, Any]) -> None:
        if el["t"] not in counts:
            return
        counts[el["t"]] += 1
        a = _attr_of(el)
        if a and a[0]:
            labels[a[0]] = f"{el['t']} {counts[el['t']]}"

    _visit(ast["blocks"], fn)
    return labels


def resolve_crossrefs(ast: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    def fn(el: dict[str, Any]) -> Any:
        if el["t"] != "Cite":
            return None
        ids = [c["citationId"] for c in el["c"][0]]
        refs = [i for i in ids if i.startswith(CROSSREF_PREFIXES)]
        if not refs:
            return None
        if len(refs) != len(ids):
            raise AuditError(f"@{', @'.join(ids)}: do not mix cross-references and citations in one bracket")
        out: list[dict[str, Any]] = []
        for n, ref in enumerate(refs):
            if ref not in labels:
                raise AuditError(f"@{ref}: no figure or table has that label (sections are not numbered)")
            if n:
                out += [{"t": "Str", "c": ","}, {"t": "Space"}]
            out.append({"t": "Link", "c": [["", ["crossref"], []], _inlines(labels[ref]), ["#" + ref, ""]]})
        return out

    return {**ast, "blocks": _walk(ast["blocks"], fn)}


# Format-specific touches ----------------------------------------------------------------------------------------


def _callout(el: dict[str, Any], for_typst: bool) -> Any:
    ident, classes, kvs = el["c"][0]
    title = dict(kvs).get("title")
    kvs = [kv for kv in kvs if kv[0] != "title"]
    head = [{"t": "Para", "c": [{"t": "Strong", "c": _inlines(title)}]}] if title else []
    if for_typst:
        fill, edge = ("#eef3fa", "#4a78b0") if "callout-note" in classes else ("#fdf5ea", "#c9731c")
        open_ = (
            f'#block(width: 100%, inset: (x: 10pt, y: 8pt), radius: 2pt, fill: rgb("{fill}"), '
            f'stroke: (left: 3pt + rgb("{edge}")))['
        )
        return [{"t": "RawBlock", "c": ["typst", open_]}, *head, *el["c"][1], {"t": "RawBlock", "c": ["typst", "]"]}]
    if head:
        head = [{"t": "Div", "c": [["", ["callout-title"], []], head]}]
    return {"t": "Div", "c": [[ident, classes, kvs], head + el["c"][1]]}


def for_typst(ast: dict[str, Any]) -> dict[str, Any]:
    def fn(el: dict[str, Any]) -> Any:
        a = _attr_of(el)
        if el["t"] == "Div" and a and any(c.startswith("callout-") for c in a[1]):
            return _callout(el, True)
        return None

    return {**ast, "blocks": _walk(ast["blocks"], fn)}


def _href(path: str, out_dir: Path, repo_root: Path) -> str:
    target = Path(path) if Path(path).is_absolute() else Path(repo_root) / path
    return os.path.relpath(target, out_dir)


def _link(text: str, href: str, title: str, cls: str) -> dict[str, Any]:
    return {"t": "Link", "c": [["", [cls], []], _inlines(text), [href, title]]}


def _file_label(path: str, repo_root: Path) -> str:
    """A data file as readers see it beside a figure: its experiment and its path inside the run directory."""
    p = Path(path) if Path(path).is_absolute() else Path(repo_root) / path
    run_dir = _run_dir_of(p)
    if run_dir is None:
        return p.name
    label = f"{run_dir.parent.name}/{p.relative_to(run_dir).as_posix()}"
    return label if not NUMBER_RE.search(label) else p.name


def _source_inlines(record: FigureRecord, out_dir: Path, repo_root: Path) -> list[dict[str, Any]]:
    """" Data: summary.csv. Notebook: notebook.ipynb." after a figure's caption in HTML (no digits: the audit reads
    it)."""
    out: list[dict[str, Any]] = [{"t": "Space"}, {"t": "Str", "c": "Data:"}]
    for i, f in enumerate(record.files):
        if Path(f.path).name == runs.MANIFEST:
            continue
        out += [{"t": "Str", "c": ","}] if len(out) > 2 else []
        out += [{"t": "Space"}, _link(_file_label(f.path, repo_root), _href(f.path, out_dir, repo_root),
                                      f"{f.path} sha256 {f.sha256}", "figure-source")]
    out.append({"t": "Str", "c": "."})
    nb = record.notebook_output or record.notebook
    if nb:
        out += [{"t": "Space"}, {"t": "Str", "c": "Notebook:"}, {"t": "Space"},
                _link(Path(nb).name, _href(nb, out_dir, repo_root), nb, "figure-notebook"), {"t": "Str", "c": "."}]
    return [{"t": "Span", "c": [["", ["figure-provenance"], []], out]}]


def for_html(ast: dict[str, Any], labels: dict[str, str], out_dir: Path, repo_root: Path,
             figures: dict[str, FigureRecord | None] | None = None) -> dict[str, Any]:
    figures = figures or {}

    def fn(el: dict[str, Any]) -> Any:
        a = _attr_of(el)
        if el["t"] == "Div" and a and any(c.startswith("callout-") for c in a[1]):
            return _callout(el, False)
        if el["t"] == "RawBlock" and el["c"][0] == "html" and el["c"][1].lstrip().startswith("<!--"):
            return []  # notes to the paper's authors stay in the source
        if el["t"] == "Span" and a and ("claim" in a[1] or "claim-cell" in a[1]):
            kv = a[2]
            name, path, sha, nb = kv.get("data-claim", ""), kv.get("data-file", ""), kv.get("data-sha256", ""), \
                kv.get("data-notebook", "")
            title = f"{name}: {path} sha256 {sha}" + (f"; written by {nb}" if nb else "")
            link = {"t": "Link", "c": [["", ["claim"], [["data-claim", name]]], el["c"][1],
                                       [_href(path, out_dir, repo_root), title]]}
            if "claim-cell" in a[1] or not nb:
                return link
            # The producing notebook, a small mark after the number (its text has no digit for the audit to see).
            mark = {"t": "Superscript", "c": [_link("nb", _href(nb, out_dir, repo_root), f"notebook {nb}", "claim-nb")]}
            return [link, mark]
        if el["t"] == "Table" and a and a[0] in labels:
            short, blocks = el["c"][1]
            if blocks and blocks[0]["t"] in ("Plain", "Para"):
                first = blocks[0]
                blocks = [{"t": first["t"], "c": _inlines(labels[a[0]] + ":") + [{"t": "Space"}] + first["c"]}]
                blocks += el["c"][1][1][1:]
            return {"t": "Table", "c": [el["c"][0], [short, blocks], *el["c"][2:]]}
        if el["t"] == "Figure" and a and a[0] in labels:
            short, blocks = el["c"][1]
            images = figure_images({"blocks": el["c"][2]})
            record = figures.get(Path(images[0]).stem) if images else None
            if blocks and blocks[0]["t"] in ("Plain", "Para"):
                first = blocks[0]
                prefix = _inlines(labels[a[0]] + ":") + [{"t": "Space"}]
                tail = _source_inlines(record, out_dir, repo_root) if record is not None else []
                blocks = [{"t": first["t"], "c": prefix + first["c"] + tail}] + blocks[1:]
            return {"t": "Figure", "c": [el["c"][0], [short, blocks], el["c"][2]]}
        return None

    return {**ast, "blocks": _walk(ast["blocks"], fn)}


# --------------------------------------------------------------------------------------------------------------------
# Provenance appendix
# --------------------------------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(header: list[str], rows: list[list[str]], widths: list[int], align: str) -> str:
    # Pipe tables take relative column widths from the dashes once a row is wider than pandoc's 72 columns.
    sep = "|" + "|".join((":" if a == "l" else "") + "-" * w + (":" if a == "r" else "") for w, a in zip(widths, align))
    lines = ["| " + " | ".join(header) + " |", sep + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


_RUN_ID_RE = re.compile(r"/(\d{8}T\d{6}Z-[0-9a-f]+)/")


def _short_file(path: str, claims: ClaimSet) -> str:
    """``experiment/file`` for the run the paper reads of an experiment, ``experiment/run/file`` for any other."""
    for info in claims.runs.values():
        prefix = info.path.rstrip("/") + "/"
        if path.startswith(prefix):
            return f"{info.experiment}/{path[len(prefix):]}"
    m = _RUN_ID_RE.search(path)
    if m:
        head = path[: m.start()]
        return f"{Path(head).name}/{m.group(1)}/{path[m.end():]}"
    return Path(path).name


def _printed(c: ResolvedClaim) -> str:
    if c.kind == "table":
        rows = len((c.value or {}).get("rows") or [])
        return f"table, {rows} rows"
    text = c.text or ""
    return text if len(text) <= 20 else text[:18].rstrip() + "…"


def _data_files(f: list[Any]) -> list[Any]:
    return [x for x in f if Path(x.path).name != runs.MANIFEST] or list(f)


def provenance_markdown(claims: ClaimSet, figures: dict[str, FigureRecord | None]) -> str:
    """The appendix: runs read, every file read with its full sha256, then every claim and figure with its file."""
    run_rows = [
        [f"`{info.experiment}`", f"`{info.run_id}`", f"`{info.notebook}`" if info.notebook else "campaign runner"]
        for _, info in sorted(claims.runs.items())
    ]
    files: dict[str, str] = {}
    for c in claims.ok():
        for f in c.files:
            files[_short_file(f.path, claims)] = f.sha256
    for r in figures.values():
        for f in r.files if r is not None else []:
            files[_short_file(f.path, claims)] = f.sha256
    file_rows = [[f"`{k}`", f"`{v}`"] for k, v in sorted(files.items())]
    claim_rows = []
    absent: dict[str, int] = {}
    for name, c in sorted(claims.claims.items()):
        if c.status != "ok":
            absent[c.experiment] = absent.get(c.experiment, 0) + 1
            continue
        data = _data_files(c.files)
        source = _short_file(data[0].path, claims)
        if c.runs > 1:
            source = f"{Path(source).parts[0]}/…/{Path(source).name} ({c.runs} runs)"
        elif len(data) > 1:
            source += f" +{len(data) - 1}"
        claim_rows.append([f"`{name}`", _md_cell(_printed(c)), c.unit, f"`{source}`", f"`{data[0].sha256[:12]}`"])
    fig_rows = []
    for name, r in sorted(figures.items()):
        if r is None:
            continue
        data = _data_files(r.files)
        fig_rows.append([f"`{name}`", ", ".join(f"`{_short_file(f.path, claims)}`" for f in data),
                         f"`{data[0].sha256[:12]}`"])
    parts = [
        # From here to the end (the appendix is last), a table may run over pages: in the text a table stays whole.
        "```{=typst}\n#show figure.where(kind: table): set block(breakable: true)\n```\n",
        "**Runs read.** The notebook each run was executed from; the executed copy, with its outputs, is the run "
        "directory's `notebook.ipynb`.\n",
        _table(["Experiment", "Run", "Notebook"], run_rows, [14, 30, 30], "lll"),
        "**Files read**, with their sha256 (each equal to the one in its run's manifest when the paper was built).\n",
        _table(["File", "sha256"], file_rows, [30, 64], "ll"),
        "**Claims**, each with the file it was computed from (the first, when it read several) and the start of "
        "that file's sha256.\n",
        _table(["Claim", "Printed", "Unit", "Source", "sha256"], claim_rows, [29, 16, 12, 28, 13], "lrlll"),
    ]
    if fig_rows:
        parts += ["**Figures.**\n", _table(["Figure", "Source", "sha256"], fig_rows, [24, 40, 16], "lll")]
    if absent:
        listed = ", ".join(f"`{e}`" for e in sorted(absent))
        parts.append(f"Claims of experiments this campaign has no finished run of ({listed}) are absent: "
                     "`claims.json` lists them with the reason, and the paper prints none of them.\n")
    return "\n".join(parts)


def _md_cell(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>|$@])", r"\\\1", text)


# --------------------------------------------------------------------------------------------------------------------
# Prepare: everything up to rendering (Quarto's pre-render hook)
# --------------------------------------------------------------------------------------------------------------------


def prepare(
    campaign: str | None = None,
    data_root: Path | str | None = None,
    repo_root: Path | str | None = None,
    out_dir: Path | str | None = None,
    qmd: Path | str | None = None,
) -> Prepared:
    """Resolve claims, draw figures, write the provenance table, and check the qmd against them.

    Writes ``claims.json``, ``figures/*.{svg,png,json}`` and ``provenance.md`` into ``out_dir`` (default
    ``paper/_generated``, where the qmd and the Quarto extension look for them). ``None`` elsewhere means:
    campaign from OFFLOAD_LAB_CAMPAIGN or the qmd's ``offload-lab: campaign:``; data from OFFLOAD_LAB_DATA_ROOT or
    ``<repo>/data``; repo from QUARTO_PROJECT_DIR or the nearest ``_quarto.yml`` up from the working directory.
    Raises AuditError for numerals typed into the qmd, ClaimError for an unknown claim (with file:line), a claim used
    where its experiment is absent, or a missing or changed data file.
    """
    generated_dir = out_dir
    repo = Path(repo_root) if repo_root is not None else default_repo_root()
    qmd_path = Path(qmd) if qmd is not None else repo / QMD
    if not qmd_path.is_file():
        raise InputError(f"{qmd_path}: no paper source")
    campaign = campaign or default_campaign(repo, qmd_path)
    data = Path(data_root) if data_root is not None else default_data_root(repo)
    gen = Path(generated_dir) if generated_dir is not None else qmd_path.parent / GENERATED
    if not (data / campaign).is_dir():
        raise InputError(f"no data for campaign {campaign!r}: {data / campaign} does not exist (see --data-dir)")

    check_source(sorted({qmd_path, *paper_sources(repo)}) if qmd is None else [qmd_path])
    from offload_lab.paper.discovery import figure_registry

    claims = resolve_claims(campaign, data, repo, extra_experiments=[d.experiment for d in figure_registry().values()])
    gen.mkdir(parents=True, exist_ok=True)
    claims_json = claims.write(gen / "claims.json")
    figures = draw_figures(campaign, data, gen / "figures", repo)
    runs.atomic_write_text(gen / "provenance.md", provenance_markdown(claims, figures))
    for p in [claims_json, gen / "provenance.md", *(gen / "figures").glob("*.json")]:
        p.chmod(0o644)  # atomic writes create 0600 files; these are published next to the paper

    body = expand(qmd_path, claims, gen)
    ast = markdown_to_ast(_front_matter(read_qmd(qmd_path), claims_json, repo) + body, repo)
    check_ast(ast, claims)
    check_figures(ast, gen, repo)
    return Prepared(claims, figures, gen, claims_json, ast, qmd_path)


# --------------------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------------------


def _timestamp(claims: ClaimSet) -> dt.datetime:
    """SOURCE_DATE_EPOCH, else the end of the newest run read: the same data give the same PDF bytes."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return dt.datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"]), tz=dt.timezone.utc)
    ends = [r.ended_at for r in claims.runs.values() if r.ended_at]
    if not ends:
        return dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return dt.datetime.strptime(max(ends)[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc)


def _render_fallback(prep: Prepared, out_dir: Path, repo_root: Path, formats: tuple[str, ...]) -> dict[str, Path]:
    labels = number_crossrefs(prep.ast)
    ast = resolve_crossrefs(prep.ast, labels)
    header = repo_root / "paper" / "typst-header.typ"
    out: dict[str, Path] = {}
    if "pdf" in formats:
        import typst

        args = ["-f", "json", "-t", "typst", "-s", "--citeproc"]
        if header.is_file():
            args += ["--include-in-header", str(header)]
        typ = out_dir / "paper.typ"
        typ.write_text(_pandoc(args, stdin=json.dumps(for_typst(ast))), encoding="utf-8")
        pdf = out_dir / "paper.pdf"
        try:
            # Only the fonts typst embeds: the same PDF on every machine, whatever fonts it has installed.
            typst.compile(
                str(typ), output=str(pdf), root=str(out_dir), timestamp=_timestamp(prep.claims),
                ignore_system_fonts=True,
            )
        except Exception as e:  # typst raises its own error types with the source location in the message
            raise RenderError(f"typst could not compile {typ}: {e}") from e
        out["typ"], out["pdf"] = typ, pdf
    if "html" in formats:
        page = out_dir / "paper.html"
        args = ["-f", "json", "-t", "html5", "-s", "--citeproc", "--embed-resources", "--resource-path", str(out_dir)]
        if (repo_root / CSS).is_file():
            args += ["--css", str(repo_root / CSS)]
        args += ["-o", str(page)]
        _pandoc(args, stdin=json.dumps(for_html(ast, labels, out_dir, repo_root, prep.figures)), cwd=out_dir)
        out["html"] = page
    return out


def _render_quarto(repo_root: Path, out_dir: Path, campaign: str, data_root: Path) -> dict[str, Path]:
    env = {
        **os.environ,
        "OFFLOAD_LAB_CAMPAIGN": campaign,
        "OFFLOAD_LAB_DATA_ROOT": str(Path(data_root).resolve()),
        # The extension's Lua finds claims.json here first, wherever Quarto runs pandoc from.
        "OFFLOAD_LAB_CLAIMS": str((repo_root / "paper" / GENERATED / "claims.json").resolve()),
    }
    proc = subprocess.run(["quarto", "render"], cwd=repo_root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RenderError(f"quarto render failed ({proc.returncode}):\n{proc.stderr.strip()[-4000:]}")
    built = repo_root / "_manuscript"
    out: dict[str, Path] = {}
    pdfs = sorted(built.glob("*.pdf"))
    if pdfs:
        out["pdf"] = Path(shutil.copy2(pdfs[0], out_dir / "paper.pdf"))
    if (built / "index.html").is_file():
        out["html"] = Path(shutil.copy2(built / "index.html", out_dir / "paper.html"))
    return out


def build_paper(
    campaign: str,
    data_root: Path | str,
    out_dir: Path | str | None = None,
    repo_root: Path | str | None = None,
    formats: tuple[str, ...] = ("pdf", "html"),
    use_quarto: bool | None = None,
    qmd: Path | str | None = None,
) -> BuildResult:
    """Resolve claims → ``claims.json``, draw figures, render PDF and HTML into ``out_dir``, audit them.

    ``use_quarto=None`` uses ``quarto render`` when ``quarto`` is on PATH (then the generated files go to
    ``paper/_generated``, where Quarto's run of the qmd finds them), else pandoc + Typst (generated files go to
    ``out_dir/_generated``). Raises ClaimError, AuditError, InputError or RenderError.
    """
    t0 = time.monotonic()
    repo = (Path(repo_root) if repo_root is not None else default_repo_root()).resolve()
    out = (Path(out_dir) if out_dir is not None else default_out_dir(repo, campaign)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    quarto = shutil.which("quarto") is not None if use_quarto is None else use_quarto
    qmd_path = Path(qmd) if qmd is not None else repo / QMD
    gen = qmd_path.parent / GENERATED if quarto else out / GENERATED
    prep = prepare(campaign, data_root, repo, gen, qmd)
    if quarto:
        files = _render_quarto(repo, out, campaign, Path(data_root))
        if gen != out / GENERATED:
            shutil.copytree(gen, out / GENERATED, dirs_exist_ok=True)
        renderer = "quarto"
    else:
        files = _render_fallback(prep, out, repo, tuple(formats))
        renderer = "pandoc+typst"
    claims_json = out / GENERATED / "claims.json"
    shutil.copy2(claims_json, out / "claims.json")
    # The paper and every section it may include: their headings and {.nocheck} literals are what the audit allows.
    sources = sorted({qmd_path.resolve(), *(p.resolve() for p in qmd_path.parent.rglob("*.qmd"))})
    report = audit(
        out / "claims.json", pdf=files.get("pdf"), html=files.get("html"), qmd=sources, repo_root=repo, lint=False
    )
    pages = None
    if files.get("pdf"):
        from pypdf import PdfReader

        pages = len(PdfReader(str(files["pdf"])).pages)
    return BuildResult(
        pdf=files.get("pdf"),
        html=files.get("html"),
        claims_json=out / "claims.json",
        figures=prep.figures,
        renderer=renderer,
        seconds=time.monotonic() - t0,
        audit=report,
        typ=files.get("typ"),
        shown_figures=[Path(src).stem for src in figure_images(prep.ast)],
        shown_claims=claims_in(prep.ast),
        pages=pages,
    )


def claims_in(ast: dict[str, Any]) -> list[str]:
    """The claims a prepared paper prints, each once, in order of first appearance."""
    seen: dict[str, None] = {}

    def fn(el: dict[str, Any]) -> None:
        a = _attr_of(el)
        if el["t"] == "Span" and a and ("claim" in a[1] or "claim-cell" in a[1]):
            seen.setdefault(a[2].get("data-claim", ""), None)

    _visit(ast["blocks"], fn)
    return list(seen)


# --------------------------------------------------------------------------------------------------------------------
# (b) Audit of the rendered paper
# --------------------------------------------------------------------------------------------------------------------

_ALLOWED_PATTERNS = [
    re.compile(r"\b(?:Figure|Fig\.|Table|Section|Appendix|Equation|Eq\.)\s+\d+(?:\.\d+)*"),
    # author-date citations: "Kwon et al. 2023", "(Kwon and Li 2023a)"
    re.compile(r"[A-Z][\w'’\-]+(?:\s+et\s+al\.|\s+and\s+[A-Z][\w'’\-]+)?,?\s+\(?(?:19|20)\d{2}[a-z]?\b"),
    re.compile(r"\[\d+(?:\s*[,–-]\s*\d+)*\]"),  # numeric citations
    # the same citation when the PDF's line breaks between the name and "et al.": "et al. 2023)"
    re.compile(r"(?:^|\s)et\s+al\.,?\s+(?:19|20)\d{2}[a-z]?\)"),
]


def claim_numbers(claims: ClaimSet) -> set[str]:
    nums: set[str] = set()
    for c in claims.ok():
        nums.update(m.group(0) for m in NUMBER_RE.finditer(c.text or ""))
    return nums


def nocheck_numbers(qmds: Iterable[Path]) -> set[str]:
    nums: set[str] = set()
    rx = re.compile(r"\[([^\[\]]*)\]\{[^{}]*\.nocheck[^{}]*\}")
    for p in qmds:
        for m in rx.finditer(Path(p).read_text(encoding="utf-8")):
            nums.update(n.group(0) for n in NUMBER_RE.finditer(m.group(1)))
    return nums


def _headings(qmds: Iterable[Path]) -> set[str]:
    heads = set()
    for p in qmds:
        for line in read_qmd(Path(p)).lines:
            m = re.match(r"^#{1,6}\s+(.*?)\s*(\{.*\})?\s*$", line)
            if m:
                heads.add(m.group(1).strip())
    return heads


def _is_heading(line: str, heading: str) -> bool:
    line = line.strip()
    return line == heading or (line.endswith(" " + heading) and len(line) <= len(heading) + 16)


def _audit_lines(
    lines: list[tuple[str, str]], allowed: set[str], headings: set[str], findings: list[Finding]
) -> None:
    """``lines`` are (where, text); numbers under the skipped sections and allowed patterns pass."""
    skipping = False
    for where, text in lines:
        if any(_is_heading(text, h) for h in SKIPPED_SECTIONS):
            skipping = True
            continue
        if skipping and any(_is_heading(text, h) for h in headings - set(SKIPPED_SECTIONS)):
            skipping = False
        for marker in MARKERS:
            if marker in text:
                findings.append(Finding(where, marker, text.strip()[:100]))
        if skipping:
            continue
        masked = text
        for rx in _ALLOWED_PATTERNS:
            masked = rx.sub(lambda m: " " * len(m.group(0)), masked)
        for m in NUMBER_RE.finditer(masked):
            if m.group(0) not in allowed:
                findings.append(Finding(where, m.group(0), text.strip()[:100]))


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


class _HTMLText(html.parser.HTMLParser):
    BLOCKS = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "td", "th", "figcaption", "br", "section",
              "header", "table", "ul", "ol", "blockquote", "pre", "figure", "title"}
    SKIP = {"script", "style", "head", "svg"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self.SKIP:
            self._skip += 1
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data.replace("\n", " "))


def html_lines(page: Path) -> list[tuple[str, str]]:
    parser = _HTMLText()
    parser.feed(Path(page).read_text(encoding="utf-8"))
    text = "".join(parser.parts)
    return [(f"{Path(page).name} line {i}", ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]


def audit(
    claims_json: Path | str | None = None,
    pdf: Path | str | None = None,
    html: Path | str | None = None,
    qmd: Iterable[Path | str] | None = None,
    repo_root: Path | str | None = None,
    lint: bool = True,
) -> AuditReport:
    """Fail (AuditError) on numerals typed into the qmd and on numbers in the rendered paper that no claim produced.

    With no arguments (Quarto's post-render hook) it audits ``_manuscript/*.pdf`` and ``_manuscript/index.html``
    against ``paper/_generated/claims.json``. Allowed without a claim: page numbers, "Figure N"/"Table N", citation
    years and numbers, the References and Provenance sections, and literals marked ``{.nocheck}`` in the qmd.
    Leftover ``{{<``, ``?@`` and ``?claim`` markers always fail.
    """
    repo = Path(repo_root) if repo_root is not None else default_repo_root()
    qmds = [Path(q) for q in qmd] if qmd is not None else paper_sources(repo)
    claims_path = Path(claims_json) if claims_json is not None else repo / "paper" / GENERATED / "claims.json"
    if pdf is None and html is None and claims_json is None:
        built = repo / "_manuscript"
        pdfs = sorted(built.glob("*.pdf"))
        pdf = pdfs[0] if pdfs else None
        html = built / "index.html" if (built / "index.html").is_file() else None
    if not claims_path.is_file():
        raise AuditError(f"{claims_path}: no claims file; build or prepare the paper first")
    claims = ClaimSet.read(claims_path)
    report = AuditReport()
    if lint:
        report.findings += lint_source(qmds)
        report.checked += [str(q) for q in qmds]
    allowed = claim_numbers(claims) | nocheck_numbers(qmds)
    headings = _headings(qmds)
    for path, reader in ((pdf, pdf_lines), (html, html_lines)):
        if path is None:
            continue
        if not Path(path).is_file():
            raise AuditError(f"{path}: the rendered paper is missing")
        _audit_lines(reader(Path(path)), allowed, headings, report.findings)
        report.checked.append(str(path))
    report.raise_if_failed()
    return report
