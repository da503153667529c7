"""The reference campaign's ref_* experiments: every derived figure computed from the published run, set beside the
published one where both exist, and every claim the paper's reference branches print resolves (issue 12)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from offload_lab.core import runs
from offload_lab.published import transcription as published
from offload_lab.published.derive import compare
from offload_lab.experiments.ref_quality.runner import consistent_counts
from offload_lab.paper import claims
from offload_lab.paper.discovery import claim_registry
from offload_lab.paper.sections import fragments

ROOT = Path(__file__).resolve().parents[1]
REF = ("ref_model", "ref_context", "ref_regimes", "ref_topology", "ref_quality", "ref_campaign")


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
    # Host RAM counts every category gen30 moves: experts, Engram tables and embedding, rounded per fit-layer block.
    exact = {k: model[f"host_gib_exact_{k}"].value for k in ("routed_expert", "engram", "embedding", "all")}
    assert exact["routed_expert"] == pytest.approx(57.1, abs=0.1) and exact["engram"] == pytest.approx(91.5, abs=0.1)
    assert exact["all"] == pytest.approx(exact["routed_expert"] + exact["engram"] + exact["embedding"])
    assert model["host_gib_pow2_expert"].value > model["host_gib_pow2_layer_tensor"].value > exact["all"]
    assert model["bound_gen30_raw_ms"].compares is None  # a bound is not a recomputation of a measured TPOT
    # The community page's memory math, recomputed on its own ladder: every row's smallest memory as printed.
    camp = {f.key: f for f in importlib.import_module("offload_lab.experiments.ref_campaign.runner").derive(
        pub, {}).figures}
    assert camp["page_smallest_agree"].value == camp["page_rows"].value == 7
    assert camp["page_weights_within"].value == camp["page_gguf_rows"].value == 6
    # Like with like: the sum of four per-stream medians (236) is this project's arithmetic, set beside nothing: not
    # beside the server's total of 168, and not beside the transcriber's own 4 x 59 as if that were published.
    regimes = {f.key: f for f in compare(pub, importlib.import_module(
        "offload_lab.experiments.ref_regimes.runner").derive(pub, {}).figures)}
    assert regimes["total_at_four"].value == 236 and regimes["total_at_four"].published is None
    assert regimes["held_up_to"].published == 6 and regimes["held_up_to"].difference == 0


def test_quality_counts_are_those_the_published_fractions_allow():
    assert consistent_counts(164, "exact", "4.3%", -0.018, 10) == [(164, 5, 2)]
    assert (150, 2, 4) in consistent_counts(150, "about", "4.0%", 0.013, 10)
    assert consistent_counts(150, "exact", None, None, 10) == [(150, 0, 0)]


def _reference_claims() -> set[str]:
    """Claim names in the paper's reference prose: the fragments that require a ref_* or the published experiment,
    and the paper's own blocks that do."""
    names: set[str] = set()
    for f in fragments(ROOT):
        if any(e.startswith("ref_") or e == "published" for e in f.experiments):
            names |= set(re.findall(r"\{\{<\s*claim\s+(\S+)\s*>\}\}", f.body))
    qmd = (ROOT / "paper" / "paper.qmd").read_text(encoding="utf-8")
    for block in re.split(r"\n::: \{\.(?:requires|only-campaign) ", qmd)[1:]:
        if "ref_" in block.split("}", 1)[0] or "published" in block.split("}", 1)[0] or "reference" in block.split("}", 1)[0]:
            names |= set(re.findall(r"\{\{<\s*claim\s+(\S+)\s*>\}\}", block.split("\n:::\n", 1)[0]))
    return names


def test_every_reference_section_renders_with_its_claims(data):
    registry = claim_registry()
    used = _reference_claims()
    assert used, "no reference branch found in the sections"
    unknown = sorted(used - set(registry))
    assert not unknown, unknown
    # The claims these runs can give: those reading the published run and the ref_* runs alone (the closing table and
    # the seat section also read capacity and cost; test_reference's campaign test resolves those).
    wanted = {n: registry[n] for n in used if set(registry[n].experiments) <= set(REF) | {"published"}}
    cs = claims.resolve_claims("reference", data, ROOT, registry=wanted)
    bad = sorted(n for n, c in cs.claims.items() if c.status != "ok")
    assert not bad, bad
