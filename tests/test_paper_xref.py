"""Section cross-references: ``@sec-x`` prints the section's title (sections are not numbered) and links to it; a
label no source defines is refused by the source lint, naming file and line, before anything runs; a section this
build leaves out is named as such."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from pypdf import PdfReader

from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError
from offload_lab.paper import build as paper
from offload_lab.paper import xref
from paper_fixtures import REPO_ROOT, copy_paper_sources, make_campaign

# Sections of the checked-in paper that a fixture campaign of boots and context keeps, and one it leaves out.
KEPT = "The question"
LEFT_OUT_BLOCK = """
::: {.only-campaign campaign="another"}
## Only in another campaign {#sec-elsewhere}

Words.
:::
"""


def _flat(text: str) -> str:
    return re.sub(r"(\w)- (\w)", r"\1\2", re.sub(r"\s+", " ", text))


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# The lint -----------------------------------------------------------------------------------------------------------


def test_a_reference_to_no_label_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.qmd", "## Alpha {#sec-alpha}\n\nSee @sec-beta and @sec-alpha.\n")
    b = _write(tmp_path / "b.qmd", "Also [-@Sec-alpha], and\n@fig-none.\n")
    with pytest.raises(InputError) as e:
        xref.check_references([a, b])
    msg = str(e.value)
    assert "a.qmd:3: @sec-beta" in msg and "b.qmd:2: @fig-none" in msg
    assert "sec-alpha" not in msg.replace("a.qmd:3: @sec-beta", "")  # defined: every form of it resolves


def test_references_in_code_comments_and_emails_are_not_references(tmp_path: Path) -> None:
    qmd = _write(tmp_path / "x.qmd", "---\ntitle: t\n---\n\n`@sec-code` and me@sec-mail.org\n<!-- @sec-comment -->\n\n"
                 "```\n@sec-fenced\n```\n")
    xref.check_references([qmd])
    assert xref.references([qmd]) == []


def test_labels_carry_their_headings_title(tmp_path: Path) -> None:
    qmd = _write(tmp_path / "x.qmd", "## The *first* part {#sec-first .appendix}\n\n![c](f.svg){#fig-f}\n\n"
                 "::: {#tbl-t}\n:::\n")
    labels = xref.defined_labels([qmd])
    assert labels["sec-first"].title == "The first part" and labels["sec-first"].where.endswith("x.qmd:1")
    assert set(labels) == {"sec-first", "fig-f", "tbl-t"} and labels["fig-f"].title == ""


def test_the_checked_in_sources_have_no_broken_reference() -> None:
    paper.check_sources(REPO_ROOT)


def test_sections_are_numbered_as_quarto_numbers_them() -> None:
    heads = [("sec-a", 2, True), ("", 3, True), ("sec-b", 3, True), ("sec-refs", 2, False), ("sec-c", 2, True),
             ("sec-d", 4, True)]
    assert xref.section_numbers(heads) == {"sec-a": "1", "sec-b": "1.2", "sec-c": "2", "sec-d": "2.0.1"}
    assert xref.numbered_sections({"number-sections": True}, {}) is True
    assert xref.numbered_sections({}, {"format": {"html": {"number-sections": True}, "typst": {}}}) is False
    assert xref.numbered_sections({}, {}) is False


# The build ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> paper.BuildResult:
    """The checked-in paper plus a reference to a kept section, to a section of another campaign and, capitalized,
    to the kept one again."""
    root = tmp_path_factory.mktemp("xref")
    repo = copy_paper_sources(root / "repo")
    qmd = repo / "paper" / "paper.qmd"
    text = qmd.read_text(encoding="utf-8")
    marker = '::: {.generated file="_generated/sections.qmd"}'
    assert marker in text
    text = text.replace(marker, LEFT_OUT_BLOCK + "\nBack to [-@sec-question]; see @sec-elsewhere and @Sec-question.\n\n"
                        + marker, 1)
    qmd.write_text(text, encoding="utf-8")
    shutil.copytree(REPO_ROOT / "configs", repo / "configs")
    data = make_campaign(root / "data", experiments=("boots", "context"))
    return paper.build_paper("embedded-fixture", data, root / "out", repo, use_quarto=False)


def test_a_section_reference_prints_its_title_linked(built: paper.BuildResult) -> None:
    html = built.html.read_text(encoding="utf-8")
    assert f'<a href="#sec-question" class="crossref">{KEPT}</a>' in html
    typ = built.typ.read_text(encoding="utf-8")
    assert f"#link(<sec-question>)[{KEPT}]" in typ
    pdf = _flat(" ".join(p.extract_text() or "" for p in PdfReader(str(built.pdf)).pages))
    assert f"Back to {KEPT}; see Only in another campaign (left out of this build) and {KEPT}." in pdf


def test_a_section_this_build_leaves_out_is_named_not_linked(built: paper.BuildResult) -> None:
    html = built.html.read_text(encoding="utf-8")
    assert 'class="crossref-absent"' in html and 'href="#sec-elsewhere"' not in html
    assert "(left out of this build)" in html and "?@" not in html
    assert built.audit.findings == []


def test_paper_build_refuses_a_broken_reference_before_reading_data(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    section = repo / "paper" / "sections" / "limits-end.qmd"
    text = section.read_text(encoding="utf-8").replace("No baseline", "See @sec-contexts.\n\nNo baseline", 1)
    section.write_text(text, encoding="utf-8")
    line = text[: text.index("@sec-contexts")].count("\n") + 1
    # No data at all: the lint comes first.
    rc = cli.main(["paper", "build", "--campaign", "nothing", "--root", str(repo), "--data-dir", str(tmp_path / "d"),
                   "--out", str(tmp_path / "out")])
    assert rc == 2
    assert f"limits-end.qmd:{line}: @sec-contexts" in capsys.readouterr().err


def test_campaign_run_with_paper_refuses_a_broken_reference_before_any_notebook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    shutil.copy2(REPO_ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copytree(REPO_ROOT / "configs", repo / "configs")
    end = repo / "paper" / "sections" / "limits-end.qmd"
    end.write_text(end.read_text().replace("No baseline", "See @sec-nowhere.\n\nNo baseline", 1))
    line = end.read_text()[: end.read_text().index("@sec-nowhere")].count("\n") + 1
    monkeypatch.setenv("OFFLOAD_LAB_ROOT", str(repo))
    data = tmp_path / "data"
    data.mkdir()
    # A URL nothing listens on: had the lint not refused first, the campaign would fail reaching it (exit 3).
    rc = cli.main(["campaign", "run", str(REPO_ROOT / "configs/campaigns/embedded.yaml"), "--paper", "--quiet",
                   "--url", "http://127.0.0.1:9", "--data-dir", str(data)])
    assert rc == 2
    assert f"limits-end.qmd:{line}: @sec-nowhere" in capsys.readouterr().err
    assert list(data.iterdir()) == []  # no run directory: nothing ran
