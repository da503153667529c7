"""The paper's section on seats and cost: no typed numeral, and it builds and passes the audit from the reference
campaign's data with every number a claim."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from pypdf import PdfReader

from offload_lab.paper import claims
from offload_lab.experiments.capacity import claims as claims_capacity
from offload_lab.experiments.capacity import claims_sources
from offload_lab.experiments.capacity import claims_study
from offload_lab.experiments.capacity import claims_teams
from offload_lab.experiments.capacity import figures as figures_capacity
from offload_lab.paper import build as paper
from offload_lab.core import runs

ROOT = Path(__file__).resolve().parents[1]
SECTION = Path(claims_sources.__file__).with_name("section.qmd")  # the capacity experiment's prose
# The text speaks of the campaign's own teams (issue 32): every size in a table, the largest by role.
ISSUE_CLAIMS = ("seats.at_alphas", "seats.rule", "capacity.alphas", "teams.largest", "pods.team_largest",
                "cost.break_even_seats",
                "cost.saving_team_largest", "cost.currency")
TABLE_CLAIMS = ("pods.teams_table", "cost.teams_table")


def test_section_has_no_typed_numeral_and_uses_only_its_own_claims():
    assert paper.lint_source([SECTION]) == []
    used = set(re.findall(r"\{\{<\s*claim\s+(\S+)\s*>\}\}", SECTION.read_text()))
    # Its own claims, and published figures printed as they are (pub.*: experiments/published/claims.py).
    own = (set(claims_capacity.SECTION) | set(claims_sources.SECTION) | set(claims_study.SECTION)
           | set(claims_teams.SECTION) | {n for n in used if n.startswith(("pub.", "published."))})
    assert used <= own, sorted(used - own)
    assert set(ISSUE_CLAIMS) <= used and set(TABLE_CLAIMS) <= used


def test_section_figures_are_the_registered_ones():
    text = SECTION.read_text()
    for name in figures_capacity.SECTION:
        assert f"_generated/figures/{name}.svg" in text


@pytest.fixture
def section_registered(monkeypatch):
    """The section's claims and figures in the paper's registries for one test (claims.py adds them for good)."""


def _only_this_section(tmp_path: Path) -> Path:
    """A paper with the real front matter and only this section, so that other sections' state cannot interfere."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "paper", repo / "paper", ignore=shutil.ignore_patterns("_generated"))
    shutil.copytree(ROOT / "_extensions", repo / "_extensions")
    shutil.copy2(ROOT / "_quarto.yml", repo / "_quarto.yml")
    real = (ROOT / "paper" / "paper.qmd").read_text()
    front = real[: real.index("\n---", 3) + 4]
    qmd = repo / "paper" / "paper.qmd"
    qmd.write_text(front + "\n\n{{< include " + str(SECTION) + " >}}\n\n## References {.unnumbered}\n\n::: {#refs}\n"
                   ":::\n\n## Provenance {#sec-provenance .appendix}\n\n"
                   "::: {.generated file=\"_generated/provenance.md\"}\n:::\n")
    return repo


def test_section_builds_from_the_reference_data_and_passes_the_audit(tmp_path, section_registered):
    data = ROOT / "data"
    if runs.latest_run(data, "reference", "cost") is None:
        pytest.skip("no reference campaign data")
    repo = _only_this_section(tmp_path)
    built = paper.build_paper("reference", data, out_dir=tmp_path / "out", repo_root=repo, use_quarto=False)
    resolved = claims.ClaimSet.read(built.claims_json)
    body = " ".join(" ".join((p.extract_text() or "").split()) for p in PdfReader(str(built.pdf)).pages)
    for name in ISSUE_CLAIMS:
        c = resolved[name]
        assert c.status == "ok" and c.text in body, name
    assert "How many developers, at what cost" in body and "transcribed with their sources" in body
    assert {n for n, r in built.figures.items() if r is not None} >= set(figures_capacity.SECTION)


def test_embedded_section_is_computed_from_the_embedded_runs_and_labelled(tmp_path):
    data = ROOT / "data"
    if runs.latest_run(data, "embedded", "cost") is None:
        pytest.skip("no embedded capacity and cost runs")
    repo = _only_this_section(tmp_path)
    built = paper.build_paper("embedded", data, out_dir=tmp_path / "out", repo_root=repo, use_quarto=False)
    resolved = claims.ClaimSet.read(built.claims_json)
    body = " ".join(" ".join((p.extract_text() or "").split()) for p in PdfReader(str(built.pdf)).pages)
    assert resolved["capacity.source"].text == "measured"
    assert "Meaningless for any real model" in body and "transcribed with their sources" not in body
    # The runs it names are the embedded campaign's own agent_turns and context runs, as the paper selects them.
    for name, exp in (("capacity.streams_run", "agent_turns"), ("capacity.prefill_run", "context")):
        run_id = resolved[name].text
        assert (data / "embedded" / exp / run_id).is_dir() and run_id in body
    for name in ISSUE_CLAIMS + ("capacity.published_pod_output_tok_s", "volume.pod_output_tok_s"):
        assert resolved[name].status == "ok" and resolved[name].text in body, name
