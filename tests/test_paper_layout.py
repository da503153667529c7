"""The PDF layout check (offload_lab.paper.layout) on small Typst documents: it finds what the paper's appendix used to
print (a value in a sixth of the page, a claim key run over its value) and passes a table sized from its content.
The built paper itself is checked in tests/test_paper.py."""

from __future__ import annotations

from pathlib import Path

import typst

from offload_lab.paper.layout import pdf_layout_problems

from paper_fixtures import REPO_ROOT

SENTENCE = ("the stack file configs/stacks/study-pod.yaml, borrowed because this campaign's stack has no price of its "
            "own, which cites the published study")


def _pdf(tmp_path: Path, body: str) -> Path:
    """``body`` under the paper's own Typst header, compiled as the paper is."""
    header = (REPO_ROOT / "paper" / "typst-header.typ").read_text()
    src = tmp_path / "doc.typ"
    src.write_text('#set page(paper: "a4", margin: (x: 2.3cm, y: 2.5cm))\n#set text(size: 10.5pt)\n'
                   + header + "\n" + body)
    out = tmp_path / "doc.pdf"
    typst.compile(str(src), output=str(out), ignore_system_fonts=True)
    return out


def _table(columns: str, rows: list[tuple[str, str, str]]) -> str:
    cells = ", ".join(f"[{a}], [{b}], [{c}]" for a, b, c in rows)
    return f"#table(columns: {columns}, table.header([Claim], [Printed], [Unit]), {cells})\n"


def test_a_value_in_a_narrow_column_is_a_tall_cell(tmp_path: Path) -> None:
    pdf = _pdf(tmp_path, _table("(40%, 12%, 48%)", [("`capacity.price_from`", SENTENCE, "")]))
    problems = pdf_layout_problems(pdf)
    assert len(problems) == 1 and "a cell wraps into" in problems[0] and "page 1" in problems[0]


def test_a_key_wider_than_its_column_is_printed_over_its_value(tmp_path: Path) -> None:
    # A name with no place to break (the header breaks long names after "_", "/" and "."): a sha256 prefix.
    key = "`bc7ce1a678c8a6742d26abb1311854071e42a34c`"
    pdf = _pdf(tmp_path, _table("(16%, 10%, 74%)", [(key, "25%", "percent")]))
    problems = pdf_layout_problems(pdf)
    assert problems and all("printed over each other" in p for p in problems)
    assert "bc7ce1a678c8" in problems[0]


def test_a_long_name_in_a_cell_breaks_and_a_short_one_or_a_number_does_not(tmp_path: Path) -> None:
    # The extension's tables.lua, as both renderers run it: sized from content, long names breakable in Typst.
    import pypandoc

    table = "| Printed by | Value |\n|:--|--:|\n| ref_model.params_community_b | 1,526.7 |\n| short_name | 2.5 |\n"
    lua = REPO_ROOT / "_extensions" / "claim" / "tables.lua"
    typ = pypandoc.convert_text(table, "typst", format="markdown", filters=[str(lua)])
    assert "columns: 2," in typ and "ref\\_#sym.zws;model.#sym.zws;params" in typ
    assert "short\\_name" in typ and "[1,526.7]" in typ
    key = "ref\\_model.params\\_community\\_b"
    html = pypandoc.convert_text(table, "html", format="markdown", filters=[str(lua)])
    assert "ref_model.params_community_b" in html and "zws" not in html and key not in html


def test_a_table_sized_from_its_content_and_a_paragraph_pass(tmp_path: Path) -> None:
    rows = [(f"`capacity.claim_{i}`", f"{i},000", "tokens") for i in range(12)]
    pdf = _pdf(tmp_path, _table("3", rows) + "\n" + " ".join([SENTENCE] * 12) + "\n\n/ key: " + SENTENCE + "\n")
    assert pdf_layout_problems(pdf) == []


def test_the_limit_is_a_number_of_lines(tmp_path: Path) -> None:
    pdf = _pdf(tmp_path, _table("(40%, 12%, 48%)", [("`k`", SENTENCE, "")]))
    # The same cell: a problem under a limit below its height, none at or above it.
    assert pdf_layout_problems(pdf, max_cell_lines=2) and not pdf_layout_problems(pdf, max_cell_lines=40)
