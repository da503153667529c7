"""Issue 14: the audit closes each way a typed number used to slip into the paper, one test per way."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from offload_lab.core.errors import AuditError, InputError
from offload_lab.paper import build as paper
from offload_lab.paper.audit import html_lines
from paper_fixtures import REPO_ROOT, copy_paper_sources, make_campaign


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_campaign(tmp_path_factory.mktemp("audit-data"), experiments=("boots", "context"))


@pytest.fixture(scope="module")
def built(data: Path, tmp_path_factory: pytest.TempPathFactory) -> paper.BuildResult:
    return paper.build_paper("embedded-fixture", data, tmp_path_factory.mktemp("audit-out"), REPO_ROOT, use_quarto=False)


def _claim_text(built: paper.BuildResult, name: str) -> str:
    return json.loads(built.claims_json.read_text())["claims"][name]["text"]


def _page_with(built: paper.BuildResult, tmp_path: Path, html: str, after: str = "Limits</h2>") -> Path:
    page = built.html.read_text()
    assert after in page
    out = tmp_path / built.html.name
    out.write_text(page.replace(after, after + html, 1))
    return out


def _audit_html(built: paper.BuildResult, page: Path) -> list[str]:
    with pytest.raises(AuditError) as e:
        paper.audit(built.claims_json, html=page, lint=False)
    return re.findall(r"'([^']+)' in", str(e.value))


def _with_snippet(repo: Path, text: str) -> None:
    """An included file (included files are not linted): what reaches the rendered audit alone."""
    (repo / "paper" / "sections" / "snippet.md").write_text(text)
    qmd = repo / "paper" / "paper.qmd"
    heading = "## The question {#sec-question}\n"
    qmd.write_text(qmd.read_text().replace(heading, heading + "\n{{< include sections/snippet.md >}}\n", 1))


def test_the_built_paper_passes(built: paper.BuildResult) -> None:
    report = paper.audit(built.claims_json, pdf=built.pdf, html=built.html)
    assert report.findings == [] and len(report.checked) >= 3


# Numbers in words ----------------------------------------------------------------------------------------------------


def test_numbers_in_words_beyond_small_counts_fail_the_lint(tmp_path: Path) -> None:
    qmd = tmp_path / "x.qmd"
    qmd.write_text("We ran two boots on ten streams; several hundred billion parameters.\n"
                   "Then twelve more, forty-two in all, a thousand requests, Twenty one.\n")
    assert [f.number for f in paper.lint_source([qmd])] == ["twelve", "forty-two", "a thousand", "Twenty one"]
    assert all(f.where.endswith("x.qmd:2") for f in paper.lint_source([qmd]))


def test_numbers_in_words_fail_the_rendered_audit(built: paper.BuildResult, tmp_path: Path) -> None:
    page = _page_with(built, tmp_path, "<p>We then ran twelve more boots and three hundred requests.</p>")
    assert _audit_html(built, page) == ["twelve", "three hundred"]


# Allow-lists per place ------------------------------------------------------------------------------------------------


def test_a_claims_number_typed_elsewhere_fails_in_html_and_pdf(data: Path, built: paper.BuildResult,
                                                                tmp_path: Path) -> None:
    startup = _claim_text(built, "boots.startup_s")  # printed by a claim in the warning: once allowed there only
    repo = copy_paper_sources(tmp_path / "repo")
    _with_snippet(repo, f"Another start took {startup} s.\n")
    with pytest.raises(AuditError) as e:
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)
    msg = str(e.value)
    assert f"'{startup}'" in msg and "paper.pdf page" in msg and "paper.html line" in msg


def test_a_number_inside_a_claim_link_must_be_that_claims(built: paper.BuildResult, tmp_path: Path) -> None:
    page = _page_with(built, tmp_path, '<p><a class="claim" data-claim="boots.startup_s" href="x">9999</a></p>')
    assert _audit_html(built, page) == ["9999"]


def test_leading_decimals_are_numbers(built: paper.BuildResult, tmp_path: Path) -> None:
    qmd = tmp_path / "x.qmd"
    qmd.write_text("The wait was .37 s, and 0.5 s after; version strings like v0.6.3 are names.\n")
    assert [f.number for f in paper.lint_source([qmd])] == [".37", "0.5"]
    assert _audit_html(built, _page_with(built, tmp_path, "<p>It took .37 s.</p>")) == [".37"]


def test_a_nocheck_literal_allows_only_its_own_place(data: Path, tmp_path: Path) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    limits = repo / "paper" / "sections" / "limits-end.qmd"
    limits.write_text(limits.read_text().replace("No baseline", "A year has [8766]{.nocheck} hours.\n\nNo baseline", 1))
    paper.build_paper("embedded-fixture", data, tmp_path / "ok", repo, use_quarto=False, formats=("html",))  # it passes
    _with_snippet(repo, "And 8766 more.\n")
    with pytest.raises(AuditError, match=r"'8766'") as e:
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)
    assert "paper.pdf page" in str(e.value) and "paper.html line" in str(e.value)


# The references section, by position -----------------------------------------------------------------------------------


def test_a_heading_named_references_skips_nothing(data: Path, tmp_path: Path) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    _with_snippet(repo, "## References\n\nWe ran 4242 times.\n\n## More limits\n\nNothing else.\n")
    with pytest.raises(AuditError) as e:
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)
    assert "'4242'" in str(e.value) and "paper.pdf page" in str(e.value) and "paper.html line" in str(e.value)


def test_the_real_references_and_appendix_are_found_by_position(built: paper.BuildResult) -> None:
    places = json.loads((built.claims_json.parent / paper.PLACES).read_text())
    assert places["references"]["text"] == "References"
    supplement = json.loads((built.supplement.claims_json.parent / paper.PLACES).read_text())
    assert supplement["appendix"][0]["id"] == "sec-provenance"
    assert places["headings"][0] == "The question" and "References" not in places["headings"]


# Text hidden in SVG and CSS -----------------------------------------------------------------------------------------


def test_text_inside_inline_svg_is_audited(built: paper.BuildResult, tmp_path: Path) -> None:
    page = _page_with(built, tmp_path, '<svg width="10" height="10"><text x="1" y="9">4242</text></svg>')
    assert _audit_html(built, page) == ["4242"]


def test_text_inside_an_embedded_svg_image_is_audited(built: paper.BuildResult, tmp_path: Path) -> None:
    svg = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg"><text>Runs: 5150</text></svg>').decode()
    page = _page_with(built, tmp_path, f'<img src="data:image/svg+xml;base64,{svg}" alt="">')
    assert _audit_html(built, page) == ["5150"]


def test_css_generated_content_is_audited(built: paper.BuildResult, tmp_path: Path) -> None:
    page = _page_with(built, tmp_path, '<style>h2::after { content: " (n = 37)"; }</style>', after="</head>")
    assert _audit_html(built, page) == ["37"]


# The HTML itself ----------------------------------------------------------------------------------------------------


def test_provenance_marks_stay_out_of_the_text(built: paper.BuildResult) -> None:
    html = built.html.read_text()
    assert re.search(r'class="claim-nb"[^>]*></a>', html) and ">nb<" not in html
    css = (REPO_ROOT / "paper" / "paper.css").read_text()
    assert 'a.claim-nb::after { content: "nb"; }' in css and "user-select: none" in css
    # What a reader copies: numbers, with no mark glued to them.
    assert not [t for _, t in html_lines(built.html) if re.search(r"\dnb\b", t)]


def test_the_html_has_a_table_of_contents_and_a_reading_width(built: paper.BuildResult) -> None:
    html = built.html.read_text()
    toc = html[html.index('<nav id="TOC"'): html.index("</nav>")]
    assert 'href="#sec-question"' in toc and "Limits" in toc
    assert "max-width: 75ch" in html


def test_the_appendix_lists_only_what_the_paper_shows(built: paper.BuildResult) -> None:
    provenance = (built.claims_json.parent / paper.GENERATED / "provenance.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+)` \| `[a-z_]+/", provenance, re.M)) & set(built.figures)
    assert listed == set(built.shown_figures)
    # A claim is a row of the claims table, or (printed as words) a term of the list under it.
    claims = set(re.findall(r"^(?:\| )?`([\w.]+)` [|(]", provenance, re.M)) & set(
        json.loads(built.claims_json.read_text())["claims"])
    assert claims == set(built.shown_claims)
    rows = [r.split(" | ") for r in provenance.split("**Claims**")[1].split("**Figures")[0].splitlines()
            if r.startswith("| `")]
    assert rows and not [r for r in rows if r[1].endswith("…") or r[1].endswith(" rows") and "table, " in r[1]]


# Bad campaigns ------------------------------------------------------------------------------------------------------


def test_an_empty_campaign_directory_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "data" / "embedded-fixture" / "context").mkdir(parents=True)
    with pytest.raises(InputError, match=r"campaign 'embedded-fixture': .* holds no run"):
        paper.build_paper("embedded-fixture", tmp_path / "data", tmp_path / "out", REPO_ROOT, use_quarto=False)


def test_a_cross_reference_split_across_pdf_lines_is_not_a_typed_number(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by the `make run` journey: "(Table" ended a line of the PDF and "3, Figure 10)." began the next.
    from offload_lab.paper import audit as audit_mod

    lines = [("paper.pdf page 9", "the answers differ (Table"), ("paper.pdf page 9", "3, Figure 10)."),
             ("paper.pdf page 9", "and 7 items flip.")]
    monkeypatch.setattr(audit_mod, "pdf_lines", lambda _pdf: lines)
    findings: list = []
    audit_mod.audit_pdf(Path("paper.pdf"), audit_mod.Places(), findings)
    assert [f.number for f in findings] == ["7"]
