"""The quality section's claims and figures resolve from a quality run's files, with the values the data gives."""

from __future__ import annotations

from quality_fixtures import write_quality_run

from offload_lab.paper import claims, discovery
from offload_lab.paper import figures
from offload_lab.experiments.quality import claims as paper_claims


def _quality_registry() -> dict:
    return {k: v for k, v in discovery.claim_registry().items() if k.startswith("quality.")}


def test_every_quality_claim_resolves_from_a_quality_run(tmp_path):
    write_quality_run(tmp_path / "data", n=6, reference_right=4, local_right=3)
    got = claims.resolve_claims("embedded-fixture", tmp_path / "data", registry=_quality_registry())
    assert got.absent == [] and all(c.status == "ok" for c in got.claims.values())
    # Reference right on items 0-3, local on 0-2: b = 1, c = 0, delta = -1/6.
    assert got["quality.gsm8k.n"].text == "6"
    assert (got["quality.gsm8k.b"].value, got["quality.gsm8k.c"].value) == (1, 0)
    assert got["quality.gsm8k.delta"].text == "\u22120.167"
    assert got["quality.humaneval.flip_fraction"].text == "16.7%"
    assert got["quality.ifeval.noise_flip.local"].text == "0.0%"
    assert got["quality.replicates"].text == "2"
    assert got["quality.gsm8k.mcnemar_p"].text == "1"
    assert all(f.path.endswith(("comparison.csv", "comparison.json", "agreement.csv", "agreement_items.csv"))
               for c in got.claims.values() for f in c.files)
    # Answers agree on items 0-2 of 6 and part at token 2; each side agrees with itself on every item.
    assert got["quality.gsm8k.agree_share"].text == "50.0%"
    assert got["quality.gsm8k.first_divergence_median"].text == "2"
    assert got["quality.gsm8k.self_agree.local"].text == "100.0%"
    verdict = got["quality.verdict"].text
    assert verdict.startswith("the greedy answers agree token for token on 9 of 18 items (50.0%; each side against "
                              "itself: 100.0% and 100.0%), and where they differ they part at token 2")
    assert "three items flip between right and wrong" in verdict and "as well as" not in verdict


def test_quality_claims_are_absent_without_a_quality_run(tmp_path):
    (tmp_path / "data" / "embedded-fixture").mkdir(parents=True)
    got = claims.resolve_claims("embedded-fixture", tmp_path / "data", registry=_quality_registry())
    assert got.absent == ["quality"] and all(c.status == "absent" for c in got.claims.values())


def test_quality_figures_draw_from_the_run(tmp_path):
    run = write_quality_run(tmp_path / "data")
    written = figures.draw_run_figures(run, "quality", out_dir=tmp_path / "fig",
                                       registry={k: v for k, v in discovery.figure_registry().items() if k.startswith("quality")})
    assert sorted(p.name for p in written) == ["quality_delta.png", "quality_delta.svg", "quality_flips.png",
                                               "quality_flips.svg"]
    assert paper_claims.LABELS["gsm8k"] == "GSM8K"
