"""The source lint's port of Quarto's own rules (offload_lab.paper.lint.quarto_findings): lines that `quarto render`
refuses or misreads are refused, naming file and line, before any claim is computed or notebook run (issue 30).
The last test asks the real Quarto, where it is on PATH, whether it refuses what the lint refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from offload_lab.core.errors import InputError
from offload_lab.paper import build as paper
from offload_lab.paper.lint import quarto_findings
from paper_fixtures import copy_paper_sources
from quarto_env import env_with_quarto, use_quarto

# capacity/section.qmd:43 before issue 30: two shortcodes, and an apostrophe between them that Quarto's parser takes
# for an opening quote.
CAPACITY_43 = ("{{< claim study.seats_alpha_1pct.difference >}}): in the blog's words, \"with "
               "{{< claim pub.blog_overlap_devs >}}")
UNPARSED = "{{< claim x fmt='a >}}"  # one shortcode, an unclosed quote
ALONE = ["{{< claim pub.all_figures >}}", "  {{< pagebreak >}}  ", "{{< include sections/limits.qmd >}}"]
GENERATED_INCLUDE = "{{< include _generated/sections.qmd >}}"  # paper.qmd:96 before issue 30


def _qmd(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "x.qmd"
    p.write_text("---\ntitle: x\n---\n\nSome prose.\n" + "\n".join(lines) + "\n")
    return p


def test_a_line_shaped_like_capacity_43_is_refused_with_its_file_and_line(tmp_path: Path) -> None:
    p = _qmd(tmp_path, CAPACITY_43, UNPARSED, "words first {{< claim a >}} then {{< claim b >}}", GENERATED_INCLUDE)
    found = quarto_findings([p])
    assert [f.where.rsplit(":", 1)[1] for f in found] == ["6", "7", "9"]
    assert "as one shortcode" in found[0].rule and "Invalid Shortcode" in found[1].rule
    assert "before the pre-render hook" in found[2].rule


def test_a_shortcode_alone_on_its_line_passes(tmp_path: Path) -> None:
    assert quarto_findings([_qmd(tmp_path, *ALONE)]) == []


def test_a_backtick_raw_block_in_the_article_is_refused_but_a_tilde_one_is_not(tmp_path: Path) -> None:
    p = _qmd(tmp_path, "```{=typst}", "#pagebreak()", "```", "", "~~~ {=typst}", "#pagebreak()", "~~~",
             "A `#super[3]`{=typst} inline raw too.", "Code `x`{.python} is not a cell.")
    assert [f.where.rsplit(":", 1)[1] for f in quarto_findings([p], article=p)] == ["6", "13"]
    assert quarto_findings([p]) == []  # Quarto scans only the manuscript's article for code cells


def test_the_source_lint_refuses_it_before_any_data_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    qmd = repo / "paper" / "paper.qmd"
    qmd.write_text(qmd.read_text().replace("## The question {#sec-question}",
                                           "## The question {#sec-question}\n\n" + CAPACITY_43, 1))
    # No data directory at all: the lint must fail first.
    with pytest.raises(InputError, match=r"paper\.qmd:\d+: Quarto reads a line .* as one shortcode"):
        paper.prepare("embedded", tmp_path / "no-data", repo)


def test_the_checkouts_paper_sources_pass() -> None:
    paper.check_quarto_sources(Path(__file__).resolve().parents[1])


def test_real_quarto_refuses_what_the_lint_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_quarto(monkeypatch)
    bad = _qmd(tmp_path, CAPACITY_43)
    assert quarto_findings([bad])
    # `quarto inspect` expands includes and shortcode lines as a render does, without running pandoc.
    done = subprocess.run(["quarto", "inspect", str(bad)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env_with_quarto())
    assert done.returncode != 0 and "Invalid Shortcode" in done.stderr
    good = tmp_path / "good.qmd"
    good.write_text(bad.read_text().replace(CAPACITY_43, "In the blog's " + CAPACITY_43))
    assert quarto_findings([good]) == []
    done = subprocess.run(["quarto", "inspect", str(good)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env_with_quarto())
    assert done.returncode == 0, done.stderr
