"""The paper builds from fixture data to a real PDF and HTML, and its checks fail where they should.

One full build per module (``built``, every measured experiment); the tests of what a campaign's data decide (which
variant of a section, which words) use :func:`paper.prepare`, which stops before rendering.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from pypdf import PdfReader

from offload_lab.paper import build as paper
from offload_lab.paper import sections
from offload_lab.paper.pandoc_ast import _stringify
from offload_lab.core.errors import AuditError, ClaimError, InputError
from paper_fixtures import (ALL_EXPERIMENTS, REPO_ROOT, copy_paper_sources, copy_section_fragments, make_campaign,
                            write_boots)

WARNING = "tiny mixture-of-experts model with random weights"
QUESTION = "## The question {#sec-question}\n"  # in paper.qmd
LIMITS = "No baseline holds every weight"  # the opening of paper/sections/limits-end.qmd, where tests add prose
FIGURES = ("audit_fit", "plan_traffic", "boot_spread", "context_tpot", "prefill_cold_cached", "concurrency_tok_s",
           "agent_turns_tok_s", "quality_delta", "quality_flips")


def _flat(text: str) -> str:
    # Typst hyphenates justified lines; the extracted text then holds "re- solved" for "resolved".
    return re.sub(r"(\w)- (\w)", r"\1\2", re.sub(r"\s+", " ", text))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_campaign(tmp_path_factory.mktemp("paper-data"), experiments=ALL_EXPERIMENTS)


@pytest.fixture(scope="module")
def built(data: Path, tmp_path_factory: pytest.TempPathFactory) -> paper.BuildResult:
    return paper.build_paper("embedded-fixture", data, tmp_path_factory.mktemp("paper-out"), REPO_ROOT, use_quarto=False)


@pytest.fixture(scope="module")
def pdf_pages(built: paper.BuildResult) -> list[str]:
    return [_flat(p.extract_text() or "") for p in PdfReader(str(built.pdf)).pages]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the paper's sources that a test may edit: paper/ and the experiment folders' prose."""
    copy_section_fragments(tmp_path / "prose", monkeypatch)
    return copy_paper_sources(tmp_path / "repo")


def _edit_qmd(repo: Path, old: str, new: str) -> tuple[Path, int]:
    """Replace ``old`` in whichever source of the paper holds it; return that file and the line of the edit."""
    for qmd in paper.paper_sources(repo):
        text = qmd.read_text()
        if old in text:
            text = text.replace(old, new, 1)
            qmd.write_text(text)
            return qmd, text[: text.index(new)].count("\n") + 1
    raise AssertionError(f"{old!r} is in no source of the paper")


def _used_claims() -> set[str]:
    text = " ".join(q.read_text() for q in paper.paper_sources(REPO_ROOT))
    return set(re.findall(r"\{\{<\s*claim\s+(\S+)\s*>\}\}", text))


def _prepared_text(campaign: str, data: Path, tmp_path: Path, repo: Path = REPO_ROOT) -> str:
    prep = paper.prepare(campaign, data, repo, tmp_path / "gen")
    return _flat(_stringify(prep.ast["blocks"]))


# The build ----------------------------------------------------------------------------------------------------------


def _ran(data: Path, campaign: str) -> set[str]:
    return {p.parent.parent.name for p in (data / campaign).glob("*/*/manifest.json")}


def _left_out(ran: set[str]) -> set[str]:
    """The notes a paper of a campaign that ran ``ran`` prints: a topic none of whose variants can be printed names
    what its first variant lacks (unless that variant is a remark, note="none")."""
    notes = set()
    for topic in sections.topics(sections.fragments(REPO_ROOT)):
        if topic.choices and not any(set(f.experiments) <= ran for f in topic.choices):
            first = topic.choices[0]
            if first.place.note != "none":
                notes.add(", ".join(e for e in first.experiments if e not in ran))
    return notes


def test_the_build_writes_a_real_pdf_and_html(built: paper.BuildResult, pdf_pages: list[str], data: Path) -> None:
    assert built.renderer == "pandoc+typst"
    assert built.pdf.read_bytes()[:5] == b"%PDF-"
    assert len(pdf_pages) >= 6
    html = built.html.read_text()
    assert "<html" in html and "Reading and writing long contexts" in html
    assert "{{<" not in html and "?claim" not in html
    # The topics whose every variant needs an experiment the fixture did not run say so, and no other.
    notes = re.findall(r"Left out: this campaign has no finished run of the ([^<]*?) experiment", _flat(html))
    assert set(notes) == _left_out(_ran(data, "embedded-fixture"))
    assert built.seconds < 30
    assert set(built.outputs()) >= {"pdf", "html", "claims"}


def test_the_pdf_holds_every_claim_the_html_links(built: paper.BuildResult, pdf_pages: list[str], data: Path,
                                                   tmp_path: Path) -> None:
    claims = json.loads(built.claims_json.read_text())["claims"]
    html = built.html.read_text()
    linked = set(re.findall(r'class="claim" data-claim="([^"]+)"', html))
    used = {n for n in _used_claims() if claims[n]["status"] == "ok"}
    # Every resolved claim the sources use is printed, except those under a .when this campaign fails.
    assert len(linked & used) >= 0.9 * len(used) and linked <= used
    body = " ".join(pdf_pages)
    text = _flat(_stringify(paper.prepare("embedded-fixture", data, REPO_ROOT, tmp_path / "gen").ast["blocks"]))
    for name in linked:
        if claims[name]["kind"] != "inline":
            continue
        assert _flat(claims[name]["text"]) in text, name
        if " " not in claims[name]["text"]:  # a phrase may run over a page break, past a figure, in the PDF
            assert claims[name]["text"] in body, name
    assert f"Median TPOT rises from {claims['context.tpot_median_ms.shortest']['text']} ms" in body


def test_text_that_depends_on_a_result_is_computed(built: paper.BuildResult, pdf_pages: list[str]) -> None:
    # Each page without its page number: a sentence may run over a page break.
    body = " ".join(re.sub(r"\s+\d+\s*$", "", p) for p in pdf_pages)
    # The fixture: short never loses the bar, shared prefix loses it at four streams, private context at two.
    assert ("short held the bar at every level measured, up to 4 streams, the longest; private context lost it "
            "first, at 2 streams") in body
    assert "set by private context" in body
    assert "no difference in scores is resolved" in body
    assert ("for TPOT the boots differ by more than the spread within a boot explains at every context length "
            "(permutation p below 0.001); for TTFT the boots differ by no more than") in body
    assert "the model does not fit by 48.7 GiB" in body
    # A table claim: every regime a row, its cells traced like any claim.
    assert "private context 1,056 1,024 each 1 2 1 60.0 20.0 (4) 18.0" in body
    html = built.html.read_text()
    assert re.search(r'class="claim" data-claim="concurrency.table"', html)


def test_the_first_page_says_it_is_a_tiny_random_model_on_a_cpu(pdf_pages: list[str]) -> None:
    first = pdf_pages[0]
    assert WARNING in first and "CPU" in first
    assert "say nothing about how any real model behaves" in first
    for real in ("DeepSeek", "Qwen", "Mixtral", "H200"):
        assert real not in " ".join(pdf_pages)


def test_figures_and_tables_are_numbered_and_cross_referenced(built: paper.BuildResult, pdf_pages: list[str]) -> None:
    body = " ".join(pdf_pages)
    assert "(Figure 1)" in body and "(Figure 2)" in body and "Figure 1:" in body
    assert "(Table 1)" in body and "Table 1:" in body
    html = built.html.read_text()
    assert 'href="#fig-audit-fit"' in html and "Figure 1:" in html and 'href="#tbl-boots"' in html


def test_html_claims_link_to_their_data_file_and_notebook(built: paper.BuildResult) -> None:
    html = built.html.read_text()
    m = re.search(r'<a href="([^"]+)" class="claim" data-claim="context.tokens.longest"\s+title="([^"]+)"', html)
    assert m, "claim link missing"
    assert m.group(1).endswith("summary.csv") and "sha256 " in m.group(2)
    assert (built.html.parent / m.group(1)).resolve().is_file()
    nb = re.search(r'data-claim="agent.tok_s.one"[^>]*>[^<]*</a><a href="([^"]+)" class="claim-nb"', html)
    assert nb and nb.group(1).endswith("notebook.ipynb") or nb and "agent_turns.ipynb" in nb.group(1)
    # Each figure names its data files and its notebook under the caption.
    cap = re.search(r'Data: <a href="([^"]+)" class="figure-source"[^>]*>agent_turns/regimes.csv</a>', html)
    assert cap and (built.html.parent / cap.group(1)).resolve().is_file()
    assert 'class="figure-notebook"' in html


def test_the_pdf_prints_no_text_over_text_and_no_tall_narrow_cell(built: paper.BuildResult) -> None:
    # The way figures.legend_problems checks legends, read back from the PDF's glyphs (offload_lab.paper.layout).
    from offload_lab.paper.layout import pdf_layout_problems

    assert pdf_layout_problems(built.pdf) == []


def test_the_provenance_appendix_lists_every_claim_and_file(built: paper.BuildResult, pdf_pages: list[str]) -> None:
    # The listings are the supplement's (paper.supplement), rendered beside the paper and linked from it.
    claims = json.loads(built.claims_json.read_text())["claims"]
    assert built.supplement is not None and built.supplement.pdf.name == "supplement.pdf"
    assert "Provenance Every number" not in " ".join(pdf_pages)
    whole = " ".join(_flat(p.extract_text() or "") for p in PdfReader(str(built.supplement.pdf)).pages)
    appendix = whole[whole.index("Provenance Every number") :]
    # Every claim the paper prints (claims.json keeps the others).
    for name in built.shown_claims:
        c = claims[name]
        assert name in appendix
        data = [f for f in c["files"] if not f["path"].endswith("manifest.json")] or c["files"]
        assert data[0]["sha256"][:12] in appendix
    summary = next(f for f in claims["context.lengths"]["files"])
    assert summary["sha256"] in appendix.replace(" ", "")  # the full sha256, once per file


def test_the_figures_and_claims_json_are_written(built: paper.BuildResult) -> None:
    gen = built.pdf.parent / paper.GENERATED
    for name in FIGURES:
        assert (gen / "figures" / f"{name}.svg").is_file() and (gen / "figures" / f"{name}.json").is_file(), name
    side = json.loads((gen / "figures" / "prefill_cold_cached.json").read_text())
    assert {Path(f["path"]).parent.parent.name for f in side["files"]} == {"context", "concurrency"}
    d = json.loads(built.claims_json.read_text())
    assert d["runs"]["context"]["run_id"] == "20260101T001000Z-c00001"
    assert d["claims"]["boots.count"]["runs"] == 1 and d["claims"]["concurrency.table"]["kind"] == "table"


def test_the_same_data_give_the_same_pdf(built: paper.BuildResult, data: Path, tmp_path: Path) -> None:
    again = paper.build_paper("embedded-fixture", data, tmp_path / "again", REPO_ROOT, formats=("pdf",), use_quarto=False)
    assert again.pdf.read_bytes() == built.pdf.read_bytes()


def test_the_repository_checkout_is_not_touched(built: paper.BuildResult) -> None:
    # The fallback writes generated files next to its output, never into paper/_generated of the checkout.
    assert not str(built.claims_json).startswith(str(REPO_ROOT / "paper"))


# Campaigns that lack an experiment, or hold the published figures -------------------------------------------------


def test_a_missing_experiment_leaves_its_section_out_with_a_note(tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "data", experiments=("boots",))
    res = paper.build_paper("embedded-fixture", data, tmp_path / "out", REPO_ROOT, use_quarto=False)
    text = _flat(" ".join(p.extract_text() for p in PdfReader(str(res.pdf)).pages))
    assert ("Reading and writing long contexts Left out: this campaign has no finished run of the context "
            "experiment") in text
    assert "The model, and why it does not fit Left out: this campaign has no finished run of the audit" in text
    assert "Figure 1" not in text and WARNING in text


def test_a_published_campaign_prints_the_published_variant(tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "data", campaign="ref", experiments=("published",))
    text = _prepared_text("ref", data, tmp_path)
    # Agent turns and the prefill come from the transcription; measured sections are left out with their note.
    assert "The study\u2019s agent regime started from 88,000 tokens" in text
    assert "hold the bar up to 6 agents and lose it at 8" in text
    # The closing table sets every published figure beside its recomputation: without the runs that recompute, it is
    # left out (the reference journey checks it whole).
    assert "Every published figure" not in text
    # The context section's published variant reads ref_context (the reference campaign has it; this fixture not).
    assert "Agent turns Left out" not in text
    assert "Boots Left out: this campaign has no finished run of the boots experiment" in text
    assert WARNING not in text


def test_a_failed_boot_is_counted_and_named(tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "data", experiments=("boots",))
    write_boots(data, run_id="20260101T000100Z-b00002", startup_s=40.0, outcome="failed", boot_outcome="oom_load")
    text = _prepared_text("embedded-fixture", data, tmp_path)
    assert "recorded two server starts, and 1 ready and 1 out of memory while loading the weights" in text
    assert "Those that became ready took 12.5 s" in text and "They took" not in text
    # Without a repeated-boot analysis, the boots section says so, and so do the limits.
    assert "A campaign with repeated boots" in text and "no experiment was repeated across boots" in text
    assert "Repeated boots. The study ran" not in text


def test_a_real_campaign_has_no_embedded_warning(tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "data", campaign="lab")
    res = paper.build_paper("lab", data, tmp_path / "out", REPO_ROOT, formats=("html",), use_quarto=False)
    html = res.html.read_text()
    assert WARNING not in html and "Reading and writing long contexts" in html


# What fails the build -----------------------------------------------------------------------------------------------


def test_a_bare_number_in_the_prose_fails_naming_it(repo: Path, data: Path, tmp_path: Path) -> None:
    qmd, line = _edit_qmd(repo, "**Decode.** Median TPOT", "**Decode.** Across 37 runs, median TPOT")
    with pytest.raises(AuditError) as e:
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)
    assert "'37'" in str(e.value) and f"{qmd.name}:{line}" in str(e.value)


def test_an_unknown_claim_fails_naming_it_and_its_line(repo: Path, data: Path, tmp_path: Path) -> None:
    qmd, line = _edit_qmd(repo, "Median TPOT {{< claim context.tpot_trend >}}",
                          "Median TPOT {{< claim context.tpot_trend >}} {{< claim context.tpot_typo >}}")
    with pytest.raises(ClaimError) as e:
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)
    assert "context.tpot_typo" in str(e.value) and f"{qmd.name}:{line}" in str(e.value)


def test_an_absent_claim_used_outside_its_section_fails(repo: Path, tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "data", experiments=("boots",))
    _edit_qmd(repo, LIMITS, "At {{< claim context.tpot_ratio >}}.\n\n" + LIMITS)
    with pytest.raises(ClaimError, match=r"claim context\.tpot_ratio is used but absent"):
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)


def test_a_table_claim_inside_a_sentence_is_refused(repo: Path, data: Path, tmp_path: Path) -> None:
    _edit_qmd(repo, LIMITS, "See {{< claim boots.table >}}.\n\n" + LIMITS)
    with pytest.raises(InputError, match="table claim boots.table must stand alone"):
        paper.prepare("embedded-fixture", data, repo, tmp_path / "gen")


def test_a_changed_data_file_fails_the_build_naming_it(repo: Path, tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "data")
    p = next((data / "embedded-fixture" / "context").glob("*c00001/summary.csv"))
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n", 1))
    with pytest.raises(ClaimError, match=r"summary\.csv was changed"):
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)


def test_a_changed_file_of_another_experiment_fails_naming_it(tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "data", experiments=("boots", "context", "concurrency"))
    p = next((data / "embedded-fixture" / "concurrency").glob("*/regimes.csv"))
    p.write_text(p.read_text() + "\n")
    with pytest.raises(ClaimError, match=r"concurrency/.*/regimes\.csv was changed"):
        paper.prepare("embedded-fixture", data, REPO_ROOT, tmp_path / "gen")


def test_a_cross_reference_to_no_figure_fails(repo: Path, data: Path, tmp_path: Path) -> None:
    qmd, line = _edit_qmd(repo, "(@fig-context-tpot)", "(@fig-nothing)")
    with pytest.raises(InputError, match=rf"{qmd.name}:{line}: @fig-nothing"):
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)


# The audit on its own -----------------------------------------------------------------------------------------------


def test_the_source_lint_skips_what_is_not_prose(tmp_path: Path) -> None:
    qmd = tmp_path / "x.qmd"
    qmd.write_text(
        "---\ntitle: Paper 2\nmargin: 3cm\n---\n\n"
        "Text with {{< claim a.b >}} and `code 42` and [a literal 99]{.nocheck} and @fig-a1.\n"
        "![cap](_generated/figures/f1.svg){#fig-f1 width=85%}\n"
        "<!-- a note with 7 in it -->\n"
        "```\nprint(123)\n```\n"
        "1. first item, sha256 and p95 and H200\n"
        "::: {.requires experiments=\"ctx2\"}\n:::\n"
        "See <https://example.org/2024/x> [@kwon2023vllm].\n"
    )
    assert paper.lint_source([qmd]) == []
    qmd.write_text("---\ntitle: x\n---\nWe saw 12 things and a 95th percentile, 10x faster.\n")
    assert [f.number for f in paper.lint_source([qmd])] == ["12", "95", "10"]
    assert paper.lint_source([qmd])[0].where.endswith("x.qmd:4")


def test_the_checked_in_paper_passes_the_source_lint() -> None:
    assert paper.lint_source(paper.paper_sources(REPO_ROOT)) == []


def test_the_rendered_audit_catches_an_unbacked_number(built: paper.BuildResult, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    html = built.html.read_text()
    assert "Reading and writing long contexts</h2>" in html
    page.write_text(html.replace("Reading and writing long contexts</h2>",
                                 "Reading and writing long contexts</h2><p>We ran 4242 times.</p>"))
    with pytest.raises(AuditError) as e:
        paper.audit(built.claims_json, html=page, qmd=paper.paper_sources(REPO_ROOT), lint=False)
    assert "'4242'" in str(e.value) and "page.html line" in str(e.value)


def test_the_rendered_audit_catches_leftover_markers(built: paper.BuildResult, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(built.html.read_text().replace("Limits</h2>", "Limits</h2><p>See ?@fig-x and {{&lt; claim a.b &gt;}}.</p>"))
    with pytest.raises(AuditError) as e:
        paper.audit(built.claims_json, html=page, qmd=paper.paper_sources(REPO_ROOT), lint=False)
    assert "'?@'" in str(e.value) and "'{{<'" in str(e.value)


def test_the_rendered_audit_passes_the_built_paper(built: paper.BuildResult) -> None:
    report = paper.audit(built.claims_json, pdf=built.pdf, html=built.html, qmd=paper.paper_sources(REPO_ROOT))
    assert len(report.checked) == len(paper.paper_sources(REPO_ROOT)) + 2 and report.findings == []


# The Quarto extension's Lua, run under pandoc --------------------------------------------------------------------

_HARNESS = r"""
local ext, claims, fmt = arg[1], arg[2], arg[3]
quarto = {
  utils = { resolve_path = function(p) return ext .. "/" .. p end },
  doc = { is_format = function(f) return f == fmt end, input_file = "/nonexistent/paper.qmd" },
  log = { warning = function(m) end },
}
local sc = dofile(ext .. "/claim.lua")
local meta = { ["offload-lab"] = { claims = pandoc.MetaString(claims) } }
local out = {}
for _, name in ipairs({ "context.tokens.longest", "context.nope" }) do
  local r = sc.claim({ name }, {}, meta)  -- an inline, or inlines (the number and its notebook mark)
  if r.t then table.insert(out, r) else for _, x in ipairs(r) do table.insert(out, x) end end
  table.insert(out, pandoc.Space())
end
local blocks = { pandoc.Plain(out) }
for _, b in ipairs(sc.claim({ "concurrency.table" }, {}, meta)) do table.insert(blocks, b) end
io.write(pandoc.write(pandoc.Pandoc(blocks), fmt))
"""


@pytest.mark.parametrize("fmt", ["html", "typst"])
def test_the_quarto_shortcode_prints_claims_and_marks_unknown_ones(
    built: paper.BuildResult, tmp_path: Path, fmt: str
) -> None:
    import pypandoc

    harness = tmp_path / "harness.lua"
    harness.write_text(_HARNESS)
    ext = REPO_ROOT / "_extensions" / "claim"
    out = subprocess.run(
        [pypandoc.get_pandoc_path(), "lua", str(harness), str(ext), str(built.claims_json), fmt],
        capture_output=True, text=True, check=True,
    ).stdout
    text = json.loads(built.claims_json.read_text())["claims"]["context.tokens.longest"]["text"]
    assert text in out and "?claim:context.nope" in out
    assert "private context" in out  # the table claim, as a table
    if fmt == "html":
        assert 'class="claim"' in out and "summary.csv" in out and "sha256" in out
        assert "<table" in out and 'class="claim-nb"' in out and "regimes.csv" in out
    else:
        assert "#table(" in out


def test_a_number_that_slips_past_the_lint_is_caught_in_the_pdf(repo: Path, data: Path, tmp_path: Path) -> None:
    # Included files are not linted (the provenance table is one); the rendered audit still sees their numbers.
    (repo / "paper" / "sections" / "snippet.md").write_text("We ran 5150 extra requests.\n")
    _edit_qmd(repo, QUESTION, QUESTION + "\n{{< include sections/snippet.md >}}\n")
    with pytest.raises(AuditError) as e:
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)
    assert "'5150'" in str(e.value) and "paper.pdf page" in str(e.value) and "paper.html line" in str(e.value)


def test_an_executable_cell_is_refused(repo: Path, data: Path, tmp_path: Path) -> None:
    _, line = _edit_qmd(repo, LIMITS, "```{python}\nx = 1\n```\n\n" + LIMITS)
    with pytest.raises(InputError, match=rf"limits-end.qmd:{line}: executable code cells"):
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=False)


# Prose that states a setup ------------------------------------------------------------------------------------------


def _setup_paragraph(repo: Path, attrs: str) -> None:
    _edit_qmd(repo, LIMITS, f"::: {{.setup experiment=\"context\" {attrs}}}\nEach context was measured a few times.\n"
                            f":::\n\n" + LIMITS)


def test_a_paragraph_whose_setup_the_cited_run_contradicts_fails_the_build(repo: Path, data: Path,
                                                                           tmp_path: Path) -> None:
    from paper_fixtures import REPEATS

    _setup_paragraph(repo, f'repeats="{REPEATS + 1}"')
    with pytest.raises(InputError) as e:
        paper.prepare("embedded-fixture", data, repo, tmp_path / "gen")
    assert "Each context was measured" in str(e.value) and f"repeats='{REPEATS + 1}'" in str(e.value)
    assert f"has '{REPEATS}'" in str(e.value)


def test_a_paragraph_whose_setup_matches_is_printed(repo: Path, data: Path, tmp_path: Path) -> None:
    from paper_fixtures import REPEATS

    _setup_paragraph(repo, f'repeats="{REPEATS}"')
    text = _flat(_stringify(paper.prepare("embedded-fixture", data, repo, tmp_path / "gen").ast["blocks"]))
    assert "Each context was measured a few times." in text

