"""pandoc and its JSON AST: walking it, table divs, the checks after the campaign filter, and cross-references."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offload_lab.core.errors import AuditError, ClaimError, InputError, OffloadLabError
from offload_lab.paper.claims import ClaimSet
from offload_lab.paper.figures import FigureRecord, verify_figure
from offload_lab.paper.qmd import EXTENSION, GENERATED

CROSSREF_PREFIXES = ("fig-", "tbl-", "sec-")


class RenderError(OffloadLabError):
    """pandoc, Typst or Quarto failed."""



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
    ext = Path(repo_root) / EXTENSION
    # The extension's filters, as Quarto runs them: the campaign's blocks, then tables sized from their content.
    filters = [a for f in ("sections.lua", "tables.lua") if (ext / f).is_file() for a in ("--lua-filter", str(ext / f))]
    out = _pandoc(["-f", "markdown", "-t", "json", *filters], stdin=markdown)
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


def section_headers(ast: dict[str, Any]) -> list[tuple[str, int, bool, str]]:
    """(id, level, numbered, title) of every heading of the prepared paper, in order."""
    found: list[tuple[str, int, bool, str]] = []

    def fn(el: dict[str, Any]) -> None:
        if el["t"] == "Header":
            ident, classes, _ = el["c"][1]
            found.append((ident, el["c"][0], "unnumbered" not in classes, _stringify(el["c"][2]).strip()))

    _visit(ast["blocks"], fn)
    return found


def section_crossrefs(ast: dict[str, Any], numbered: bool) -> dict[str, str]:
    """sec- label -> what ``@label`` prints: "Section N" when sections are numbered, else the section's title."""
    from offload_lab.paper.xref import section_numbers

    heads = section_headers(ast)
    if numbered:
        numbers = section_numbers([(i, level, num) for i, level, num, _ in heads])
        return {i: f"Section {n}" for i, n in numbers.items() if i.startswith("sec-")}
    return {i: title for i, _, _, title in heads if i.startswith("sec-")}


def _ref_inlines(cite: dict[str, Any], text: str, is_number: bool) -> list[dict[str, Any]]:
    """The text of one reference: "Figure 3", "3" for ``[-@fig-x]``, "see 3" for ``[see @fig-x]``; a section's
    title (``is_number`` false) stays as it is, whatever the form."""
    word, _, number = text.rpartition(" ")
    if not is_number or not word:
        return _inlines(text)
    if cite.get("citationPrefix"):
        return cite["citationPrefix"] + [{"t": "Space"}] + _inlines(number)
    if cite.get("citationMode", {}).get("t") == "SuppressAuthor":
        return _inlines(number)
    return _inlines(text)


def resolve_crossrefs(ast: dict[str, Any], labels: dict[str, str], sections: dict[str, str] | None = None,
                      left_out: dict[str, str] | None = None, numbered: bool = False) -> dict[str, Any]:
    """Cross-references as links: ``labels`` (figures and tables) and ``sections`` (label -> "Section N" or title)
    are in this build; ``left_out`` (label -> title) are sections the sources define and this build leaves out,
    printed as their title and "(left out of this build)", unlinked."""
    from offload_lab.paper.xref import LEFT_OUT, label_key

    present = {**labels, **(sections or {})}
    absent = left_out or {}

    def fn(el: dict[str, Any]) -> Any:
        if el["t"] != "Cite":
            return None
        cites = el["c"][0]
        ids = [c["citationId"] for c in cites]
        refs = [i for i in ids if label_key(i).startswith(CROSSREF_PREFIXES)]
        if not refs:
            return None
        if len(refs) != len(ids):
            raise AuditError(f"@{', @'.join(ids)}: do not mix cross-references and citations in one bracket")
        out: list[dict[str, Any]] = []
        for n, cite in enumerate(cites):
            ref = label_key(cite["citationId"])
            if n:
                out += [{"t": "Str", "c": ","}, {"t": "Space"}]
            if ref in present:
                text, is_number = present[ref], numbered or not ref.startswith("sec-")
                if cite["citationId"][:1].isupper():
                    text = text[:1].upper() + text[1:]
                out.append({"t": "Link", "c": [["", ["crossref"], []], _ref_inlines(cite, text, is_number),
                                               ["#" + ref, ""]]})
            elif ref in absent:
                title = absent[ref]
                if cite["citationId"][:1].isupper():
                    title = title[:1].upper() + title[1:]
                out.append({"t": "Span", "c": [["", ["crossref-absent"], [["data-label", ref]]],
                                               _inlines(f"{title} ({LEFT_OUT})")]})
            else:
                what = "section" if ref.startswith("sec-") else "figure or table"
                raise AuditError(f"@{cite['citationId']}: no {what} of this paper has that label "
                                 "(the source lint checks every label; was the paper prepared from other sources?)")
        return out

    return {**ast, "blocks": _walk(ast["blocks"], fn)}



def claims_in(ast: dict[str, Any]) -> list[str]:
    """The claims a prepared paper prints, each once, in order of first appearance."""
    seen: dict[str, None] = {}

    def fn(el: dict[str, Any]) -> None:
        a = _attr_of(el)
        if el["t"] == "Span" and a and ("claim" in a[1] or "claim-cell" in a[1]):
            seen.setdefault(a[2].get("data-claim", ""), None)

    _visit(ast["blocks"], fn)
    return list(seen)



def paper_places(ast: dict[str, Any]) -> dict[str, Any]:
    """What the rendered-text audit needs from the prepared paper (written to ``places.json`` by prepare).

    ``numbers``: how many times each number is printed by a claim or a ``[literal]{.nocheck}`` span, so that the PDF
    audit lets a number through as often as those places print it, and no more. ``headings``: the body's headings in
    order; ``references`` and ``appendix``: the heading of the section holding ``#refs`` and the ``.appendix``
    headings, with their ids, found by their position in the document, not by their names.
    """
    from offload_lab.paper.qmd import numbers_in

    numbers: dict[str, int] = {}
    heads: list[tuple[str, str, list[str]]] = []  # (id, text, classes)
    refs_after: list[int] = []  # the index of the heading before the #refs div

    def fn(el: dict[str, Any]) -> None:
        a = _attr_of(el)
        if el["t"] == "Header" and a:
            heads.append((a[0], _stringify(el["c"][2]).strip(), a[1]))
        elif el["t"] == "Div" and a and a[0] == "refs" and heads:
            refs_after.append(len(heads) - 1)
        elif el["t"] == "Span" and a and {"claim", "claim-cell", "nocheck"} & set(a[1]):
            for n in numbers_in(_stringify(el["c"][1])):
                numbers[n] = numbers.get(n, 0) + 1

    _visit(ast["blocks"], fn)
    refs = heads[refs_after[0]] if refs_after else None
    appendix = [h for h in heads if "appendix" in h[2]]
    body = [h[1] for h in heads if h is not refs and h not in appendix]
    return {"numbers": numbers, "headings": body,
            "references": {"id": refs[0], "text": refs[1]} if refs else None,
            "appendix": [{"id": h[0], "text": h[1]} for h in appendix]}
