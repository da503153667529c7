"""A rehearsal on a pod model PREDICTED from hardware (issue 32), end to end and short: `pod predict` writes E9's pod
model (two B300, every weight in VRAM), a short campaign on E9's stack runs against it through the real runner and
notebooks, its record and first page say that every number is a prediction, and the paper's seats and cost print the
campaign's own team size, α and currency (USD), with no team of the study's named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload_lab.campaigns import rehearse
from offload_lab.cli.main import main
from offload_lab.paper.claims import resolve_claims

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "tests" / "fixtures" / "campaigns" / "predicted-e9-short.yaml"


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    import os

    tmp = tmp_path_factory.mktemp("predicted")
    model = tmp / "e9-predicted.yaml"
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        assert main(["pod", "predict", "--stack", "configs/stacks/study-b300.yaml", "--out", str(model)]) == 0
    finally:
        os.chdir(here)
    res = rehearse.rehearse(CAMPAIGN, data_root=tmp / "data", pod_model=model, paper=False, log=lambda s: None)
    return res, model


def test_the_record_says_the_pod_is_a_prediction(rehearsal):
    res, model = rehearsal
    rec = res.record
    assert rec["predicted"] is True
    assert "predicted from hardware" in rec["pod_model"]["prediction"]["label"]
    assert rec["pod_model"]["prediction"]["factors"]["routing_skew"] > 0
    assert [e["outcome"] for e in rec["experiments"]] == ["ok"] * 4
    on_disk = json.loads((res.run / "rehearsal.json").read_text())
    assert on_disk["predicted"] is True


def test_the_paper_prints_the_campaigns_team_alpha_and_currency(rehearsal, tmp_path):
    res, _ = rehearsal
    cs = resolve_claims(res.campaign, res.data_root, ROOT).claims
    assert "prediction" in cs["rehearsal.pod_model_basis"].text
    assert cs["cost.currency"].text == "USD"
    assert cs["capacity.team_sizes"].text == "30"
    assert cs["teams.largest"].text == "30"
    assert "| 30 |" in cs["pods.teams_table"].text and "α = 2%" in cs["pods.teams_table"].text
    assert "USD a month" in cs["cost.teams_table"].text
    # the study's own team sizes are not this campaign's: their claims do not apply, and nothing fails
    assert cs["pods.team_250"].text == "n/a"
    out = tmp_path / "gen"
    assert main(["paper", "prepare", "--campaign", res.campaign, "--data-dir", str(res.data_root),
                 "--out", str(out)]) == 0
    sections = (out / "sections.qmd").read_text()
    assert "claim cost.teams_table" in sections and "claim cost.currency" in sections
    assert "team_250" not in sections.split("## What it costs")[1].split("\n## ")[0]


def test_compare_prediction_sets_each_predicted_figure_beside_the_rehearsals(rehearsal, capsys):
    res, _ = rehearsal
    assert main(["compare-prediction", str(CAMPAIGN), "--data-dir", str(res.data_root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = {f["name"] for f in out["figures"]}
    # at the campaign's own conditions: its stream counts and its context lengths
    assert {"agent_turns_1_median_tok_s", "agent_turns_3_median_tok_s", "tpot_4096_ms", "ttft_16384_s"} <= names
    assert all(f["measured"] and f["run"] for f in out["figures"])
    # the experiments this short campaign does not run are named, not left out in silence
    whys = " ".join(m["why"] for m in out["missing"])
    assert "no cached_prefix experiment" in whys and "no concurrency experiment" in whys
    # the emulated pod runs the predicted pod model: its decode comes back close to the prediction
    agent = [f for f in out["figures"] if f["name"].startswith("agent_turns_")]
    assert all(1 / 1.5 <= f["ratio"] <= 1.5 for f in agent), agent
    assert main(["compare-prediction", str(CAMPAIGN), "--data-dir", str(res.data_root)]) == 0
    assert "missing: " in capsys.readouterr().out
