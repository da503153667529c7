"""The quality harness end to end against the real vLLM CPU server serving the tiny random-weight MoE.

The tiny model scores about zero; these tests check the plumbing: continuation on its ChatML template, canaries,
per-item artefacts, scoring, the comparison, the CLI and the notebook under the campaign runner.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from quality_fixtures import datasets_dir

from offload_lab.campaigns import runner as campaign
from offload_lab.cli import main as cli
from offload_lab.core import runs
from offload_lab.quality import canaries, endpoints
from offload_lab.experiments.quality import runner as experiment

pytestmark = pytest.mark.server

SMALL = ["--limit", "2", "--max-tokens", "12", "--replicates", "2"]


def test_vllm_continues_the_final_message_on_the_chatml_template(embedded_server):
    spec = endpoints.EndpointSpec(url=embedded_server.url, kind="vllm")
    report = canaries.run_canaries(spec, embedded_server.model_name)
    checks = {c.name: c for c in report.checks}
    assert report.valid, report.reasons
    assert checks["continuation.prompt_tokens"].passed and checks["continuation.rendered"].passed
    assert checks["thinking.off"].passed and checks["finish_reason"].passed


def test_a_plain_chat_request_to_vllm_is_caught_as_not_continuing(embedded_server):
    spec = endpoints.EndpointSpec(url=embedded_server.url, kind="openai")
    report = canaries.run_canaries(spec, embedded_server.model_name)
    assert not report.valid
    assert any(r.startswith("continuation.prompt_tokens") for r in report.reasons)


def test_cli_run_twice_then_compare(embedded_server, tmp_path, capsys):
    data_dir = tmp_path / "data"
    common = ["--endpoint", embedded_server.url, "--datasets", str(datasets_dir()), "--data-dir", str(data_dir),
              "--campaign", "q", "--json", *SMALL]
    outs = {}
    for label in ("reference", "local"):
        assert cli.main(["quality", "run", "--label", label, *common]) == 0
        outs[label] = json.loads(capsys.readouterr().out)
        assert outs[label]["valid"] is True
    run_dir = Path(outs["local"]["run"])
    m = runs.load_manifest(run_dir)
    assert m["experiment"] == "quality-side" and m["outcome"] == "ok" and runs.verify_run(run_dir) == []
    side = run_dir / "sides" / "local"
    records = runs.read_events(side / "items.jsonl")
    assert len(records) == 3 * 2 * 2  # benchmarks x items x replicates
    for r in records:
        assert r["request"]["body"]["temperature"] == 0.0 and r["request"]["body"]["max_tokens"] == 12
        assert r["response"]["choices"] and r["status"] in ("ok", "empty", "truncated")
    he = [r for r in records if r["benchmark"] == "humaneval"]
    assert all(r["request"]["body"]["continue_final_message"] is True for r in he)
    scoring = json.loads((side / "scoring.json").read_text())
    assert scoring["scored"] and scoring["humaneval_self_check"]["ok"]
    summary = pd.read_csv(side / "summary.csv")
    assert sorted(summary["benchmark"].unique()) == ["gsm8k", "humaneval", "ifeval"]
    assert (summary["items"] == 2).all()

    assert cli.main(["quality", "compare", "--reference", outs["reference"]["run"], "--local", str(side),
                     "--data-dir", str(data_dir), "--campaign", "q", "--resamples", "500", "--json"]) == 0
    comp = json.loads(capsys.readouterr().out)
    comp_dir = Path(comp["run"])
    assert comp_dir.parent.name == "quality" and runs.verify_run(comp_dir) == []
    table = pd.read_csv(comp_dir / experiment.COMPARISON_CSV)
    assert sorted(table["benchmark"]) == ["gsm8k", "humaneval", "ifeval"] and (table["n"] == 2).all()
    doc = json.loads((comp_dir / experiment.COMPARISON_JSON).read_text())
    assert doc["same_endpoint"] is True
    assert runs.load_manifest(comp_dir)["quality"]["inputs"]["local"]["manifest_sha256"]


def test_cli_run_with_a_plain_chat_adapter_is_kept_invalid(embedded_server, tmp_path, capsys):
    code = cli.main(["quality", "run", "--endpoint", embedded_server.url, "--kind", "openai", "--benchmark",
                     "humaneval", "--datasets", str(datasets_dir()), "--data-dir", str(tmp_path / "data"), "--json",
                     *SMALL])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["valid"] is False and out["summary"] is None
    m = runs.load_manifest(out["run"])
    assert m["outcome"] == "ok" and m["quality"]["valid"] is False
    assert not (Path(out["side"]) / "scores.csv").exists()


def test_quality_notebook_runs_under_the_campaign_runner(embedded_server, tmp_path, repo_root, monkeypatch):
    monkeypatch.setenv("OFFLOAD_LAB_DATASETS", str(datasets_dir()))
    spec = {"name": "qtest", "experiments": [{
        "experiment": "quality", "notebook": str(repo_root / "notebooks/quality.ipynb"),
        "parameters": {"limit": 2, "replicates": 2, "max_tokens": {"gsm8k": 12, "ifeval": 12, "humaneval": 12},
                       "resamples": 500}}]}
    f = tmp_path / "campaign.yaml"
    f.write_text(yaml.safe_dump(spec))
    result = campaign.run_campaign(f, data_root=tmp_path / "data", url=embedded_server.url)
    (run_dir,) = result.runs
    m = runs.load_manifest(run_dir)
    meta = json.loads((run_dir / experiment.QUALITY_JSON).read_text())
    assert m["outcome"] == "ok" and meta["valid"] is True and meta["reference_is_local"] is True
    assert {"quality.json", "comparison.json", "comparison.csv", "paired_items.csv", "notebook.ipynb",
            "sides/local/items.jsonl", "sides/reference/items.jsonl", "figures/quality_delta.svg"} <= set(m["files"])
    assert runs.verify_run(run_dir) == []
    doc = json.loads((run_dir / "comparison.json").read_text())
    assert "A/A" in doc["note"] and set(doc["benchmarks"]) == {"gsm8k", "ifeval", "humaneval"}
