"""The paper's data lock (issue 14): every cited file hashed into paper.lock.json, and `--frozen` compares each with
its committed version, which catches a data file edited together with its manifest."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from offload_lab.core.errors import ClaimError, InputError
from offload_lab.paper import build as paper
from paper_fixtures import REPO_ROOT, make_campaign


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    """A campaign's data committed to a git repository of its own."""
    data = make_campaign(tmp_path / "store" / "data", experiments=("boots", "context"))
    _git(tmp_path / "store", "init", "-q")
    _git(tmp_path / "store", "add", "-A")
    _git(tmp_path / "store", "commit", "-q", "-m", "data")
    return data


def _tamper(data: Path) -> Path:
    """Edit a cited CSV and write its new sha256 into the run's manifest: the manifest check no longer sees it."""
    csv = next((data / "embedded-fixture" / "context").glob("*/summary.csv"))
    csv.write_text(csv.read_text().replace("\n", "\n", 1) + "\n")
    manifest = csv.parent / "manifest.json"
    m = json.loads(manifest.read_text())
    m["files"]["summary.csv"]["sha256"] = hashlib.sha256(csv.read_bytes()).hexdigest()
    m["files"]["summary.csv"]["bytes"] = csv.stat().st_size
    manifest.write_text(json.dumps(m, indent=2))
    return csv


def test_the_build_records_every_cited_file_and_manifest(committed: Path, tmp_path: Path) -> None:
    res = paper.build_paper("embedded-fixture", committed, tmp_path / "out", REPO_ROOT, use_quarto=False,
                            formats=("html",), frozen=True)
    lock = json.loads(res.lock.read_text())
    claims = json.loads(res.claims_json.read_text())
    cited = {f["path"] for c in claims["claims"].values() if c["status"] == "ok" for f in c["files"]}
    assert cited <= set(lock["files"]) and lock["campaign"] == "embedded-fixture"
    manifests = [p for p in lock["files"] if p.endswith("/manifest.json")]
    assert len(manifests) >= len(claims["runs"])
    for path, entry in lock["files"].items():
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == entry["sha256"], path


def test_frozen_catches_a_file_edited_with_its_manifest(committed: Path, tmp_path: Path) -> None:
    csv = _tamper(committed)
    # The manifest agrees with the edited file, so an ordinary build passes, and prints the changed numbers.
    paper.build_paper("embedded-fixture", committed, tmp_path / "plain", REPO_ROOT, use_quarto=False, formats=("html",))
    with pytest.raises(ClaimError) as e:
        paper.build_paper("embedded-fixture", committed, tmp_path / "frozen", REPO_ROOT, use_quarto=False,
                          formats=("html",), frozen=True)
    assert f"{csv}: differs from the committed version" in str(e.value)
    assert f"{csv.parent / 'manifest.json'}: differs" in str(e.value)


def test_frozen_refuses_data_outside_git(tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "loose", experiments=("boots",))
    with pytest.raises(InputError, match="not inside a git repository"):
        paper.build_paper("embedded-fixture", data, tmp_path / "out", REPO_ROOT, use_quarto=False, formats=("html",),
                          frozen=True)
