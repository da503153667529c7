"""The reference campaign's ref_* experiments: every derived figure computed from the published run, set beside the
published one where both exist, and every claim the paper's reference branches print resolves (issue 12)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from offload_lab.core import runs
from offload_lab.experiments.published import runner as published
from offload_lab.experiments.published.derive import compare
from offload_lab.experiments.ref_quality.runner import consistent_counts
from offload_lab.paper import claims
from offload_lab.paper.discovery import claim_registry

ROOT = Path(__file__).resolve().parents[1]
REF = ("ref_model", "ref_context", "ref_regimes", "ref_topology", "ref_quality", "ref_campaign")
SECTIONS = sorted((ROOT / "paper" / "sections").glob("_*.qmd")) + [ROOT / "paper" / "paper.qmd"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A published run and one run of each ref_* experiment, made through their runners (no notebooks)."""
    root = tmp_path_factory.mktemp("data")
    run = runs.new_run(root, "reference", published.EXPERIMENT, {})
    published.transcribe(run, "configs/published/study.yaml", ROOT)
    run.finish("ok")
    for exp in REF:
        r = runs.new_run(root, "reference", exp, {})
        importlib.import_module(f"offload_lab.experiments.{exp}.runner").run_experiment(
            r, root, "reference", {"resamples": 500})
        r.finish("ok")
    return root


def test_every_derived_figure_uses_published_figures_and_compares_where_it_can(data):
    pub = published.read_published(data, "reference")
    for exp in REF:
        d = importlib.import_module(f"offload_lab.experiments.{exp}.runner").derive(pub, {"resamples": 500})
        for f in compare(pub, d.figures):
            assert f.formula and f.unit is not None, (exp, f.key)
            if f.compares:
                assert f.published == pub.value(f.compares), (exp, f.key)


def test_the_issue_figures_are_computed(data):
    pub = published.read_published(data, "reference")
    ctx = {f.key: f for f in importlib.import_module("offload_lab.experiments.ref_context.runner").derive(pub, {}).figures}
    assert ctx["context_ratio"].value == 64 and ctx["tpot_ratio"].value == pytest.approx(8.3 / 7.6)
    model = {f.key: f for f in compare(pub, importlib.import_module(
        "offload_lab.experiments.ref_model.runner").derive(pub, {}).figures)}
    assert model["routed_experts"].difference == 0
    assert model["bound_gen30_raw_ms"].value == pytest.approx(7.61, abs=0.01)  # the findings' uniform-routing bound
    assert model["bound_more_raw_ms"].value > model["bound_gen30_raw_ms"].value
    assert model["host_gib_pow2_expert"].value > model["host_gib_exact_expert"].value


def test_quality_counts_are_those_the_published_fractions_allow():
    assert consistent_counts(164, "exact", "4.3%", -0.018, 10) == [(164, 5, 2)]
    assert (150, 2, 4) in consistent_counts(150, "about", "4.0%", 0.013, 10)
    assert consistent_counts(150, "exact", None, None, 10) == [(150, 0, 0)]


def _reference_claims_in(text: str) -> set[str]:
    """Claim names inside the paper's reference branches (blocks that require a ref_* or the published experiment)."""
    names: set[str] = set()
    for block in re.split(r"\n::: \{\.requires ", text)[1:]:
        head = block.split("}", 1)[0]
        if "ref_" in head or '"published"' in head:
            names |= set(re.findall(r"\{\{<\s*claim\s+(\S+)\s*>\}\}", block.split("\n::: {.requires ", 1)[0]))
    return names


def test_every_reference_section_renders_with_its_claims(data):
    registry = claim_registry()
    used = set().union(*(_reference_claims_in(p.read_text(encoding="utf-8")) for p in SECTIONS))
    assert used, "no reference branch found in the sections"
    unknown = sorted(used - set(registry))
    assert not unknown, unknown
    wanted = {n: registry[n] for n in used if registry[n].experiments[0] in REF + ("published",)}
    cs = claims.resolve_claims("reference", data, ROOT, registry=wanted)
    bad = sorted(n for n, c in cs.claims.items() if c.status != "ok")
    assert not bad, bad


def test_the_closing_table_lists_every_published_figure(data):
    registry = claim_registry()
    cs = claims.resolve_claims("reference", data, ROOT, registry={"pub.all_figures": registry["pub.all_figures"]})
    table = cs["pub.all_figures"].value
    keys = [f.key for f in published.load_transcription(ROOT / "configs" / "published" / "study.yaml").figures]
    assert len(table["rows"]) == len(keys)
    printed = [r for r in table["rows"] if r[-1] != "this table only"]
    assert len(printed) > len(keys) // 2
