"""The README's journeys, each in a bare copy of the repository (tests/journey_helpers.py): nothing beside it, no
``OFFLOAD_LAB_*`` variables, ``HOME`` in a temporary folder, the Makefile's own targets, the real vLLM server, the real
papermill and the real paper build.

1. ``make run`` on a shortened embedded campaign that keeps every experiment of ``embedded.yaml`` (smaller sizes,
   same kinds): every experiment ok, the paper's PDF and HTML, and a paper that fails, naming the file, once a cited
   data file is gone.
2. ``make paper-reference`` whole: every reference notebook, then the full paper, PDF and HTML; the published run
   says its transcription was not checked against a source this copy does not have.
3. A hand run from ``notebooks/`` (papermill, and nbconvert with the notebook's own parameters), then the paper: it
   still builds and lists the hand run as skipped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pypdf import PdfReader

from tests.journey_helpers import ROOT, bare_env, make, make_bare_copy, tail

pytestmark = [pytest.mark.slow]

JOURNEY = "embedded-journey"
# Smaller sizes of the embedded campaign's own parameters; an experiment or key not named keeps embedded.yaml's.
SHORT: dict[str, dict[str, Any]] = {
    "context": {"context_lengths": [128, 512], "output_tokens": 16, "repeats": 2},
    "quality_bfloat16": {"limit": 2, "replicates": 1, "max_tokens": {"gsm8k": 8, "ifeval": 8, "humaneval": 8}},
    "quality_float32": {"limit": 2, "replicates": 1, "max_tokens": {"gsm8k": 8, "ifeval": 8, "humaneval": 8}},
    "audit": {"benchmark_repeats": 1, "plan_repeats": 1},
    "concurrency": {"streams": [1, 2], "requests_per_stream": 2},
    "agent_turns": {"streams": [1, 2], "turns": 2},
    "cached_prefix": {"users": 2, "requests_per_user": 2},
}


def _short_campaign(copy: Path) -> Path:
    spec = yaml.safe_load((copy / "configs/campaigns/embedded.yaml").read_text(encoding="utf-8"))
    spec["name"] = JOURNEY
    for exp in spec["experiments"]:
        params = exp.setdefault("parameters", {})
        for key, value in SHORT.get(exp["experiment"], {}).items():
            if key in params:
                params[key] = value
        if "regimes" in params:  # shorter outputs in every regime
            params["regimes"] = {k: {**r, "output_tokens": 16} for k, r in params["regimes"].items()}
    path = copy / "configs/campaigns" / f"{JOURNEY}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def _pdf_text(path: Path) -> str:
    return "\n".join(page.extract_text() or "" for page in PdfReader(path).pages)


def _manifests(data: Path, campaign: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for m in sorted((data / campaign).glob("*/*/manifest.json")):
        out.setdefault(m.parent.parent.name, []).append(json.loads(m.read_text()))
    return out


def _checkout_data_listing() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / "data").glob("*/*/*")}


@pytest.fixture(scope="module")
def embedded_journey(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("journey-run")
    before = _checkout_data_listing()
    copy = make_bare_copy(tmp)
    campaign_file = _short_campaign(copy)
    env = bare_env(tmp / "home")
    done = make(copy, env, "run", f"CAMPAIGN={JOURNEY}", timeout=1800)
    return {"copy": copy, "env": env, "done": done, "campaign_file": campaign_file, "before": before}


def test_make_run_ends_0_with_every_experiment_ok_and_the_paper_built(embedded_journey: dict[str, Any]) -> None:
    copy, done = embedded_journey["copy"], embedded_journey["done"]
    assert done.returncode == 0, tail(done)
    spec = yaml.safe_load(embedded_journey["campaign_file"].read_text())
    runs_by_exp = _manifests(copy / "data", JOURNEY)
    for exp in spec["experiments"]:
        outcomes = [m["outcome"] for m in runs_by_exp.get(exp["experiment"], [])]
        assert outcomes == ["ok"], (exp["experiment"], outcomes)
    out = copy / "_output" / JOURNEY
    assert (out / "paper.pdf").stat().st_size > 10_000 and (out / "paper.html").stat().st_size > 10_000
    text = _pdf_text(out / "paper.pdf")
    assert "random weights" in text
    claims = json.loads((out / "claims.json").read_text())["claims"]
    # Every claim whose experiments this campaign all ran resolved (the others are absent: their sections are left
    # out). A claim may read another experiment's runs besides its own (capacity's comparisons read `published`).
    from offload_lab.paper import discovery

    ran = {e["experiment"] for e in spec["experiments"]}
    registry = discovery.claim_registry()
    unresolved = [k for k, c in claims.items()
                  if k in registry and set(registry[k].experiments) <= ran and c["status"] != "ok"]
    assert claims and not unresolved, unresolved
    # What `make run` says at its end is where things are.
    assert f"_output/{JOURNEY}/paper.pdf" in done.stdout


def test_make_run_writes_nothing_outside_the_copy(embedded_journey: dict[str, Any]) -> None:
    assert embedded_journey["done"].returncode == 0, tail(embedded_journey["done"])
    assert _checkout_data_listing() == embedded_journey["before"]
    assert not (ROOT / "data" / JOURNEY).exists() and not (ROOT / "_output" / JOURNEY).exists()


def test_the_paper_fails_naming_a_deleted_data_file(embedded_journey: dict[str, Any], tmp_path: Path) -> None:
    copy, env = embedded_journey["copy"], embedded_journey["env"]
    assert embedded_journey["done"].returncode == 0, tail(embedded_journey["done"])
    data = tmp_path / "data"
    shutil.copytree(copy / "data" / JOURNEY, data / JOURNEY)
    (context,) = (data / JOURNEY / "context").iterdir()
    (context / "summary.csv").unlink()
    done = make(copy, env, "paper", f"CAMPAIGN={JOURNEY}", f"DATA={data}")
    assert done.returncode != 0
    assert "summary.csv" in done.stdout + done.stderr


@pytest.fixture(scope="module")
def reference_journey(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("journey-reference")
    copy = make_bare_copy(tmp)
    env = bare_env(tmp / "home")
    before = {p.name for p in (copy / "data" / "reference").glob("*/*")}
    done = make(copy, env, "paper-reference")
    return {"copy": copy, "env": env, "done": done, "before": before}


def test_make_paper_reference_runs_every_notebook_and_builds_the_whole_paper(reference_journey: dict[str, Any]) -> None:
    copy, done = reference_journey["copy"], reference_journey["done"]
    assert done.returncode == 0, tail(done)
    spec = yaml.safe_load((copy / "configs/campaigns/reference.yaml").read_text())
    new = {name: [m for m in ms if m["run_id"] not in reference_journey["before"]]
           for name, ms in _manifests(copy / "data", "reference").items()}
    for exp in spec["experiments"]:
        assert [m["outcome"] for m in new.get(exp["experiment"], [])] == ["ok"], exp["experiment"]
    out = copy / "_output" / "reference"
    assert (out / "paper.pdf").stat().st_size > 10_000 and (out / "paper.html").stat().st_size > 10_000
    assert len(PdfReader(out / "paper.pdf").pages) >= 10


def test_the_reference_paper_prints_published_figures_beside_their_recomputation(
        reference_journey: dict[str, Any]) -> None:
    """A sample of both transcriptions' figures, read back from the whole reference PDF: the central result, the
    volume from the joint inference, 1,847 EUR beside its recomputation, the community page's memory-math rows, the
    blog's scores; and none of the typesetting defects of issue 21."""
    assert reference_journey["done"].returncode == 0, tail(reference_journey["done"])
    pdf = reference_journey["copy"] / "_output" / "reference" / "paper.pdf"
    text = " ".join(" ".join(page.extract_text() for page in PdfReader(pdf).pages).split())
    for figure in ("262 by volume. 19 by concurrency.", "1,847 EUR a month more than subscriptions", "1,846",
                   "261 to 263", "about 183", "0.960", "458.0", "457.6", "1,024", "about 1,526.7", "1,526.4",
                   "missed exactly the same questions", "149.9 GiB in all"):
        assert figure in text, figure
    for defect in ("++", "−+", "+−", "−0.0%", "183.0 ", "gen30′s", "1 errors"):
        assert defect not in text, defect


def test_without_the_published_summary_the_published_run_says_it_was_not_checked(
        reference_journey: dict[str, Any]) -> None:
    copy = reference_journey["copy"]
    assert reference_journey["done"].returncode == 0, tail(reference_journey["done"])
    (published,) = [m for m in _manifests(copy / "data", "reference")["published"]
                    if m["run_id"] not in reference_journey["before"]]
    # The summary's text ships with the package (offload_lab/resources/published): a bare clone checks it too.
    assert published["provenance"]["source_checked"] is True


def test_a_hand_run_from_notebooks_then_the_paper(reference_journey: dict[str, Any]) -> None:
    copy, env = reference_journey["copy"], reference_journey["env"]
    assert reference_journey["done"].returncode == 0, tail(reference_journey["done"])
    nb_dir = copy / "notebooks"
    bin_dir = copy / ".venvs/lab/bin"
    # papermill from notebooks/, into the reference campaign, with a parameter the campaign file does not declare.
    pm = subprocess.run([str(bin_dir / "papermill"), "ref_quality.ipynb", str(copy / "pm-out.ipynb"), "-p",
                         "campaign", "reference", "-p", "resamples", "500"], cwd=nb_dir, env=env,
                        capture_output=True, text=True, timeout=600)
    assert pm.returncode == 0, tail(pm)
    # nbconvert from notebooks/ with the notebook's own parameters: a hand run into the campaign `scratch`.
    nbc = subprocess.run([str(bin_dir / "jupyter"), "nbconvert", "--to", "notebook", "--execute", "--output",
                          str(copy / "nbconvert-out.ipynb"), "published.ipynb"], cwd=nb_dir, env=env,
                         capture_output=True, text=True, timeout=600)
    assert nbc.returncode == 0, tail(nbc)
    assert not (nb_dir / "data").exists()
    scratch = _manifests(copy / "data", "scratch")["published"]
    assert [m["outcome"] for m in scratch] == ["ok"] and scratch[0]["hand_run"] is True
    hand = [m for m in _manifests(copy / "data", "reference")["ref_quality"] if m.get("hand_run")]
    assert [m["outcome"] for m in hand] == ["ok"]
    done = make(copy, env, "paper", "CAMPAIGN=reference")
    assert done.returncode == 0, tail(done)
    claims = json.loads((copy / "_output/reference/claims.json").read_text())
    # Other parameters than the campaign file's: the paper passes the hand run over and says so.
    assert hand[0]["run_id"] in json.dumps(claims.get("skipped", []))
