"""Issue 24: the audit's disguises outside the prose, one test per class. Every rendered text node is text (alt
text, title= tooltips, raw Typst and HTML, #super[...], <abbr title=...>), and a number is a number in any script
(superscript, circled, Roman, vulgar fractions) or in words ("two dozen", "Four-fifths")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from offload_lab.core.errors import AuditError
from offload_lab.paper import build as paper
from paper_fixtures import REPO_ROOT, make_campaign


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> paper.BuildResult:
    data = make_campaign(tmp_path_factory.mktemp("disguise-data"), experiments=("boots", "context"))
    return paper.build_paper("embedded-fixture", data, tmp_path_factory.mktemp("disguise-out"), REPO_ROOT,
                             use_quarto=False)


def _lint(tmp_path: Path, text: str) -> list[str]:
    qmd = tmp_path / "x.qmd"
    qmd.write_text(text)
    return [f.number for f in paper.lint_source([qmd])]


def _audit_html(built: paper.BuildResult, tmp_path: Path, html: str) -> list[str]:
    page = built.html.read_text()
    after = "Limits</h2>"
    assert after in page
    out = tmp_path / built.html.name
    out.write_text(page.replace(after, after + html, 1))
    with pytest.raises(AuditError) as e:
        paper.audit(built.claims_json, html=out, lint=False)
    return re.findall(r"'([^']+)' in", str(e.value))


def test_the_built_paper_still_passes(built: paper.BuildResult) -> None:
    assert paper.audit(built.claims_json, pdf=built.pdf, html=built.html).findings == []


def test_number_words_with_multipliers_and_fractions(built: paper.BuildResult, tmp_path: Path) -> None:
    assert _lint(tmp_path, "We ran two dozen boots; Four-fifths of them held; three quarters of a day.\n") == [
        "two dozen", "Four-fifths", "three quarters"]
    assert _lint(tmp_path, "One server, two sides, half the experts, a third of the time.\n") == []
    assert _audit_html(built, tmp_path, "<p>two dozen boots, Four-fifths held</p>") == ["two dozen", "Four-fifths"]


def test_numerals_in_other_scripts(built: paper.BuildResult, tmp_path: Path) -> None:
    text = "Boots: x², ③ and ⑫, Ⅻ runs, ½ of them, ٣ more.\n"
    assert _lint(tmp_path, text) == ["²", "③", "⑫", "Ⅻ", "½", "٣"]
    assert _audit_html(built, tmp_path, f"<p>{text}</p>") == ["²", "③", "⑫", "Ⅻ", "½", "٣"]


def test_alt_text_and_captions_in_attributes(built: paper.BuildResult, tmp_path: Path) -> None:
    assert _lint(tmp_path, '![A plot](f.svg){#fig-x fig-alt="Runs of 4242 streams" width=80%}\n') == ["4242"]
    assert _audit_html(built, tmp_path, '<p><img src="f.svg" alt="Runs of 4242 streams"></p>') == ["4242"]


def test_tooltips_in_title_attributes(built: paper.BuildResult, tmp_path: Path) -> None:
    assert _lint(tmp_path, '::: {.callout-note title="We ran 77 boots"}\nText.\n:::\n') == ["77"]
    assert _audit_html(built, tmp_path, '<p><span title="We ran 77 boots">boots</span></p>') == ["77"]
    # The build's own provenance tooltip (a link's title naming the file it links to) is not text of the paper.
    page = built.html.read_text()
    assert re.search(r'<a href="[^"]*" class="claim"[^>]*title="[^"]*sha256', page)


def test_abbr_titles(built: paper.BuildResult, tmp_path: Path) -> None:
    assert _lint(tmp_path, 'The <abbr title="sixty-four experts">MoE</abbr> layer.\n') == ["sixty-four"]
    assert _audit_html(built, tmp_path, '<p><abbr title="64 experts">MoE</abbr></p>') == ["64"]


def test_raw_typst_and_html_blocks(tmp_path: Path) -> None:
    text = ("Prose.\n\n```{=typst}\n// a comment with 12 is not rendered\n#text[Runs: 31]\n```\n\n"
            "```{=html}\n<p>Boots: 57</p>\n```\n\n```python\nx = 99  # code is not prose\n```\n")
    assert _lint(tmp_path, text) == ["31", "57"]


def test_inline_raw_typst_super(tmp_path: Path) -> None:
    assert _lint(tmp_path, "Runs`#super[3]`{=typst} and `x = 5` in code.\n") == ["3"]
