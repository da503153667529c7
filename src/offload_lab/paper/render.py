"""Rendering: the format-specific touches on the AST, the pandoc + Typst fallback, and `quarto render`."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offload_lab.core import runs
from offload_lab.paper.claims import ClaimSet
from offload_lab.paper.figures import FigureRecord, _run_dir_of
from offload_lab.paper.pandoc_ast import (
    RenderError,
    _attr_of,
    _inlines,
    _pandoc,
    _walk,
    figure_images,
    number_crossrefs,
    resolve_crossrefs,
    section_crossrefs,
)
from offload_lab.paper.qmd import CSS, NUMBER_RE

if TYPE_CHECKING:  # build imports this module
    from offload_lab.paper.build import Prepared


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


FIGURE_LINKS = "figure-links.json"  # under _generated/: what _source_inlines prints, for the Quarto extension


def figure_links(figures: dict[str, FigureRecord | None], repo_root: Path) -> dict[str, Any]:
    """Per figure, the data files and the notebook that _source_inlines links after its caption, for the Quarto
    path's figures.lua to print the same (labels, paths relative to the repository, titles)."""
    out: dict[str, Any] = {}
    for name, record in figures.items():
        if record is None:
            continue
        files = [{"label": _file_label(f.path, repo_root), "path": f.path, "title": f"{f.path} sha256 {f.sha256}"}
                 for f in record.files if Path(f.path).name != runs.MANIFEST]
        out[name] = {"files": files, "notebook": record.notebook_output or record.notebook or None}
    return out


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
            # The producing notebook: an empty link that paper.css marks "nb" with ::after, out of copied text.
            mark = {"t": "Link", "c": [["", ["claim-nb"], [["aria-label", "notebook"]]], [],
                                       [_href(nb, out_dir, repo_root), f"notebook {nb}"]]}
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


def render_fallback(prep: "Prepared", out_dir: Path, repo_root: Path, formats: tuple[str, ...]) -> dict[str, Path]:
    labels = number_crossrefs(prep.ast)
    sections = section_crossrefs(prep.ast, prep.numbered)
    # Sections the sources define that this build left out (another campaign's variant, a block without a note).
    left_out = {k: v.title or k for k, v in prep.labels.items() if k.startswith("sec-") and k not in sections}
    ast = resolve_crossrefs(prep.ast, labels, sections, left_out, prep.numbered)
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
        # Sections as <section> elements: the audit finds the appendix by its id; a table of contents as Quarto's has.
        args = ["-f", "json", "-t", "html5", "-s", "--citeproc", "--embed-resources", "--resource-path", str(out_dir),
                "--section-divs", "--toc", "--toc-depth=2"]
        if (repo_root / CSS).is_file():
            args += ["--css", str(repo_root / CSS)]
        args += ["-o", str(page)]
        _pandoc(args, stdin=json.dumps(for_html(ast, labels, out_dir, repo_root, prep.figures)), cwd=out_dir)
        out["html"] = page
    return out
