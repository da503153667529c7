"""The main job in miniature, every part real: the campaign starts the embedded stack's server, runs the context
notebook through papermill, stops the server; the paper is built from what it wrote, and fails once a cited file
is gone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from pypdf import PdfReader

from offload_lab.campaigns import runner as campaign
from offload_lab.paper import build as paper
from offload_lab.core import runs
from offload_lab.core.errors import ClaimError

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def campaign_data(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    tmp = tmp_path_factory.mktemp("e2e")
    spec = yaml.safe_load((repo_root / "configs/campaigns/embedded.yaml").read_text())
    spec["stack"] = str(repo_root / spec["stack"])
    spec["experiments"] = [dict(e, notebook=str(repo_root / e["notebook"]),
                                parameters={"context_lengths": [128, 512], "output_tokens": 16, "repeats": 2})
                           for e in spec["experiments"] if e["experiment"] == "context"]
    # A campaign of its own: the paper reads only runs whose parameters are their campaign file's, and these are
    # smaller than embedded.yaml's.
    spec["name"] = "embedded-e2e"
    f = tmp / "embedded.yaml"
    f.write_text(yaml.safe_dump(spec))
    data = tmp / "data"
    result = campaign.run_campaign(f, data_root=data)
    assert result.boot_run is not None
    return data


def test_the_campaign_leaves_verified_runs_and_no_server(campaign_data: Path) -> None:
    (boot,) = list(runs.iter_runs(campaign_data, "embedded-e2e", "boots"))
    (context,) = list(runs.iter_runs(campaign_data, "embedded-e2e", "context"))
    for run_dir in (boot, context):
        assert runs.load_manifest(run_dir)["outcome"] == "ok"
        assert runs.verify_run(run_dir) == []
    assert (boot / "server.log").stat().st_size > 0
    assert runs.load_manifest(context)["server"]["boot_run"] == str(boot)


def test_the_paper_builds_from_the_campaigns_data(campaign_data: Path, repo_root: Path, tmp_path: Path) -> None:
    result = paper.build_paper("embedded-e2e", campaign_data, out_dir=tmp_path / "out", repo_root=repo_root)
    text = "\n".join(page.extract_text() for page in PdfReader(result.pdf).pages)
    assert "random weights" in text
    import json

    claims = json.loads(result.claims_json.read_text())["claims"]
    for name in ("context.tpot_median_ms.shortest", "context.ttft_median_s.longest", "model.experts"):
        assert claims[name]["status"] == "ok"
        assert claims[name]["text"] in text, name

def test_the_paper_fails_naming_a_deleted_data_file(campaign_data: Path, repo_root: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(campaign_data, data)
    (context,) = list(runs.iter_runs(data, "embedded-e2e", "context"))
    (context / "summary.csv").unlink()
    with pytest.raises(ClaimError, match="summary.csv"):
        paper.build_paper("embedded-e2e", data, out_dir=tmp_path / "out", repo_root=repo_root)
