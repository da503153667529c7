"""A paper for every campaign file in configs/campaigns/: a section that breaks for one campaign breaks here.

Each campaign's paper is built, through the command line, from the committed data where the repository has the
campaign's runs (embedded, reference), else from fixture runs made by ``paper_fixtures.make_gpu_campaign``: committed
runs that real notebooks wrote, copied under the parameters that campaign's files declare and marked as fixtures.
One build per campaign name (module-scoped); a new campaign file is tested without a change here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pypdf import PdfReader

from offload_lab.cli import main as cli
from offload_lab.core import runs
from paper_fixtures import REPO_ROOT, make_gpu_campaign

CAMPAIGN_FILES = sorted((REPO_ROOT / "configs" / "campaigns").glob("*.yaml"))
COMMITTED = REPO_ROOT / "data"


def _campaign_of(path: Path) -> str:
    return str(yaml.safe_load(path.read_text(encoding="utf-8"))["name"])


def _has_committed_runs(campaign: str) -> bool:
    return next(runs.iter_runs(COMMITTED, campaign), None) is not None


# `paper build` takes a campaign's name, not its file: files that share a name (embedded and embedded-repeat,
# study-pod and study-pod-repeat) give the same command on the same data, so their paper is built once.
_BUILDS: dict[str, dict] = {}


@pytest.fixture(scope="module", params=CAMPAIGN_FILES, ids=[p.stem for p in CAMPAIGN_FILES])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    path: Path = request.param
    campaign = _campaign_of(path)
    if campaign not in _BUILDS:
        _BUILDS[campaign] = _build(campaign, tmp_path_factory.mktemp(campaign))
    return {**_BUILDS[campaign], "file": path}


def _build(campaign: str, root: Path) -> dict:
    if _has_committed_runs(campaign):
        data, made = COMMITTED, None
    else:
        data = root / "data"
        data.mkdir()
        made = make_gpu_campaign(data, campaign)
    out = root / "out"
    rc = cli.main(["paper", "build", "--campaign", campaign, "--data-dir", str(data), "--out", str(out),
                   "--root", str(REPO_ROOT)])
    return {"campaign": campaign, "rc": rc, "out": out, "data": data, "made": made}


def test_the_campaigns_paper_builds(built: dict) -> None:
    assert built["rc"] == 0, f"{built['file'].name}: paper build exited {built['rc']} (its message is above)"
    pdf, html = built["out"] / "paper.pdf", built["out"] / "paper.html"
    assert pdf.stat().st_size > 0 and html.stat().st_size > 0
    assert len(PdfReader(str(pdf)).pages) > 1
    assert "<h2" in html.read_text(encoding="utf-8")


def test_fixture_runs_say_they_are_fixtures(built: dict) -> None:
    if built["made"] is None:
        pytest.skip(f"{built['campaign']}: built from the committed data")
    assert built["made"]["copied"], f"no experiment of {built['file'].name} found a committed run to copy"
    for run_dir in runs.iter_runs(built["data"], built["campaign"]):
        fixture = runs.load_manifest(run_dir).get("fixture")
        assert fixture and "test fixture" in fixture["note"], run_dir
        assert runs.verify_run(run_dir) == [], run_dir
