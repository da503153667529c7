"""The paper's qmd: reading its files, the defaults they set, and expanding shortcodes to pandoc markdown (the data a
claim reads is :mod:`offload_lab.paper.sources`)."""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from offload_lab.core import inputs, paths
from offload_lab.core.errors import ClaimError, InputError
from offload_lab.paper.claims import ClaimSet, ResolvedClaim
from offload_lab.paper.formats import pipe_separator

GENERATED = "_generated"
QMD = Path("paper") / "paper.qmd"
EXTENSION = Path("_extensions") / "claim"
CSS = Path("paper") / "paper.css"
TYPST_OPTIONS = ("papersize", "margin", "fontsize", "section-numbering", "mainfont", "page-numbering")

# A numeral not glued to a word: "p95", "sha256" and "H200" are names, "95th" and "10x" are numbers; a leading
# decimal (".37 s") is a number too.
_NUMERAL = r"(?<![A-Za-z_\d.,])(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
# Numbers in words beyond the small counts prose needs ("two GPUs", "ten streams"): claims print those as digits, so
# "twelve", "forty-two" and "three hundred" in the text are typed numbers.
_UNITS = "one|two|three|four|five|six|seven|eight|nine"
_NUMBER_WORDS = (
    r"\b(?:(?:eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen)"
    rf"|(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[-\s](?:{_UNITS}))?"
    rf"|(?:a|{_UNITS}|ten)\s+(?:hundred|thousand|million|billion|trillion)|(?:a|{_UNITS}|ten)\s+(?:dozen|score)s?"
    # fractions in words: "four-fifths", "two thirds", "three-quarters"
    rf"|(?:{_UNITS}|ten)[-\s](?:halves|thirds?|quarters?|fifths?|sixths?|sevenths?|eighths?|ninths?|tenths?"
    r"|hundredths?|thousandths?))\b"
)
# Numerals of other scripts that are not decimal digits (\d already takes those): superscripts and subscripts (²),
# circled and parenthesized numbers (①), Roman numerals (Ⅻ), vulgar fractions (½), and the like.
_OTHER_NUMERALS = "[" + "".join(
    re.escape(chr(c)) for c in range(0x80, 0x20000)
    if unicodedata.numeric(chr(c), None) is not None and unicodedata.decimal(chr(c), None) is None
    and unicodedata.category(chr(c)) in ("No", "Nl")) + "]+"
NUMBER_RE = re.compile(f"{_NUMERAL}|{_NUMBER_WORDS}|{_OTHER_NUMERALS}", re.IGNORECASE)


def number_token(text: str) -> str:
    """A number as the audit compares it: words lower-cased with single spaces, numerals as printed."""
    return re.sub(r"[\s-]+", " ", text.lower()) if text[:1].isalpha() else text


def numbers_in(text: str) -> list[str]:
    return [number_token(m.group(0)) for m in NUMBER_RE.finditer(text)]


# ::: {.generated file="_generated/NAME"} then ::: — a file `paper prepare` writes, read in its place by the sections
# filter (Quarto) or by expand() (pandoc build). Not an include: Quarto expands includes while it lists its inputs,
# before the pre-render hook that writes the file has run (quarto-cli issue 12491).
GENERATED_DIV = re.compile(r'^:::+\s*\{\.generated\s+file="([^"]+)"\s*\}\s*$')
SHORTCODE_RE = re.compile(r"(?<!\{)\{\{<\s*([A-Za-z][\w-]*)((?:\s+[^\s>]+)*)\s*>\}\}(?!\})")


@dataclass
class Qmd:
    path: Path
    meta: dict[str, Any]
    lines: list[str]  # the body
    first_line: int  # line number (1-based) of lines[0] in the file




def read_qmd(path: Path) -> Qmd:
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        for i in range(1, len(lines)):
            if lines[i].strip() in ("---", "..."):
                meta = inputs.parse_yaml("\n".join(lines[1:i]), path, "the YAML front matter of") or {}
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


def quarto_config(repo_root: Path) -> dict[str, Any]:
    p = Path(repo_root) / "_quarto.yml"
    if not p.is_file():
        return {}
    data = inputs.read_yaml(p, "Quarto project file", expect=None) or {}
    if not isinstance(data, dict):
        raise InputError(f"{p}: must hold a mapping (project:, manuscript:, format:)")
    return data


def paper_sources(repo_root: Path) -> list[Path]:
    """Every qmd the paper is written from: paper/ (not what prepare generates) and the experiment folders' prose."""
    from offload_lab.paper import discovery

    paper = Path(repo_root) / "paper"
    own = [p for p in paper.rglob("*.qmd") if GENERATED not in p.relative_to(paper).parts]
    return sorted(own) + [p for _, p in discovery.section_files()]



# --------------------------------------------------------------------------------------------------------------------
# Expansion: shortcodes to pandoc markdown
# --------------------------------------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return re.sub(r"([\\`*_{}\[\]()#+\-.!<>|~^$@'\"])", r"\\\1", text)


def _attr_value(text: str) -> str:
    return text.replace("\\", "/").replace('"', "'")


def _provenance_attrs(c: ResolvedClaim, cls: str = "claim") -> str:
    f = c.files[0]
    # A hand run links its own executed notebook or none: the campaign's template did not write its data.
    nb = c.notebook_output or ("" if getattr(c, "by_hand", False) else c.notebook) or ""
    return (f'.{cls} data-claim="{c.name}" data-file="{_attr_value(f.path)}" data-sha256="{f.sha256}" '
            f'data-notebook="{_attr_value(nb)}"')


def _claim_markdown(c: ResolvedClaim, where: str) -> str:
    if c.status != "ok":
        return f'[?claim:{_md_escape(c.name)}]{{.claim-absent data-claim="{c.name}" data-where="{where}"}}'
    span = f"[{_md_escape(c.text or '')}]{{{_provenance_attrs(c)}}}"
    if getattr(c, "by_hand", False):  # read from a run made by hand, because the user asked: said beside it
        span += ' [(by hand)]{.claim-hand title="from a run made by hand, outside the campaign\'s sessions; see Limits"}'
    return span


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
    # A header may hold a number too ("Pods (α = 0.01)"): traced like a cell, as the Quarto path's claim.lua does.
    lines = ["| " + " | ".join(cell(h) for h in value["columns"]) + " |", sep]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in value["rows"]]
    return "\n" + "\n".join(lines) + "\n"


def _resolve_include(arg: str, base: Path, generated_dir: Path) -> Path:
    # The qmd names generated files as Quarto sees them (paper/_generated/...); this build may write them elsewhere.
    parts = Path(arg).parts
    if parts and parts[0] == GENERATED:
        return Path(generated_dir, *parts[1:])
    return base / arg


def expand(qmd_path: Path, claims: ClaimSet, generated_dir: Path, *, _depth: int = 0) -> str:
    """The body of a qmd with claim, include and pagebreak shortcodes and ``.generated`` divs replaced; unknown
    claims raise ClaimError."""
    qmd = read_qmd(qmd_path)
    out: list[str] = []
    skip_close = False
    for i, line in enumerate(qmd.lines):
        where = f"{qmd_path}:{qmd.first_line + i}"
        if skip_close:
            skip_close = False
            if line.strip() == ":::":
                continue
        gen = GENERATED_DIV.match(line)
        if gen:
            # What sections.lua's Generated does under Quarto: the file in place of the (empty) div.
            nxt = qmd.lines[i + 1].strip() if i + 1 < len(qmd.lines) else ""
            if nxt != ":::" or _depth > 4:
                raise InputError(f"{where}: a .generated div is empty: close it on the next line with :::")
            target = _resolve_include(gen.group(1), qmd_path.parent, generated_dir)
            if not target.is_file():
                raise InputError(f"{where}: generated file {target} does not exist; run `offload-lab paper prepare`")
            out.append(expand(target, claims, generated_dir, _depth=_depth + 1))
            skip_close = True
            continue
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
                    raise ClaimError(f"{where}: unknown claim {args[0]!r} (claims are declared in "
                                     "src/offload_lab/experiments/<name>/claims*.py)")
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
    typst = ((quarto_config(repo_root).get("format") or {}).get("typst")) or {}
    for key in TYPST_OPTIONS:
        if key in typst and key not in meta:
            meta[key] = typst[key]
    return "---\n" + yaml.safe_dump(meta, allow_unicode=True, sort_keys=False) + "---\n\n"

