"""Experiments as units (issue 11): layers held by import-linter, notebooks generated from their Params models, hand
runs that are complete and safe from the root or from notebooks/, and the paper reading only runs whose parameters are
the campaign file's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from offload_lab.campaigns import execute
from offload_lab.core import runs
from offload_lab.experiments import cells
from offload_lab.experiments import notebook as nbmod
from offload_lab.paper import selection

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SRC = ROOT / "src" / "offload_lab"


def test_every_experiment_notebook_has_the_parameters_cell_its_model_generates():
    kinds = cells.experiment_notebooks(ROOT)
    assert {"context", "concurrency", "agent_turns", "cached_prefix", "capacity", "cost", "published"} <= set(kinds)
    stale = [k for k in kinds if cells.sync_notebook(ROOT, k, write=False)]
    assert stale == [], f"run `offload-lab notebooks sync`: {stale}"


def test_papermill_help_shows_types_and_the_embedded_campaigns_defaults():
    out = subprocess.run([str(BIN / "papermill"), "--help-notebook", str(ROOT / "notebooks/context.ipynb")],
                         capture_output=True, text=True, check=True).stdout
    assert "context_lengths: list[int] (default [256, 1024, 2048, 4096])" in out
    assert "run_dir: Optional[str] (default None)" in out


def test_no_module_of_the_library_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


def _lint(tmp_path: Path, extra: str | None) -> subprocess.CompletedProcess:
    """lint-imports on a copy of the package, with one import added to the core when ``extra`` is given."""
    pkg = tmp_path / "src" / "offload_lab"
    shutil.copytree(SRC, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    if extra:
        with open(pkg / "core" / "stats.py", "a") as f:
            f.write(f"\n{extra}\n")
    toml = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(toml[toml.index("[tool.importlinter]"):])
    return subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path / "src"), "PATH": str(BIN)})


def test_the_layer_contracts_hold_and_break_on_a_forbidden_import(tmp_path):
    held = _lint(tmp_path / "a", None)
    assert held.returncode == 0, held.stdout + held.stderr
    broken = _lint(tmp_path / "b", "from offload_lab.cli import main as _forbidden  # noqa")
    assert broken.returncode != 0
    assert "BROKEN" in broken.stdout and "offload_lab.core.stats" in broken.stdout


def _repo_copy(tmp_path: Path) -> Path:
    """A repository a notebook can run in: configs, notebooks, pyproject (data/ starts empty)."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "configs", root / "configs")
    (root / "notebooks").mkdir(parents=True)
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(nb, root / "notebooks" / nb.name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _papermill(root: Path, cwd: Path, *params: str) -> subprocess.CompletedProcess:
    # The project's own kernel, installed by `make envs` from this checkout: it must not pin that checkout, so a run
    # from the copy lands in the copy's data/ (no OFFLOAD_LAB_ROOT in its spec or in the environment).
    args = [str(BIN / "papermill"), str(root / "notebooks/published.ipynb"), str(cwd / "out.ipynb"), "--cwd", str(cwd),
            "-k", execute.KERNEL_NAME]
    for p in params:
        args += ["-p", *p.split("=", 1)]
    env = {k: v for k, v in os.environ.items() if k != "OFFLOAD_LAB_ROOT"}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env)


def test_a_hand_run_from_notebooks_lands_in_the_repositorys_data_with_a_complete_manifest(tmp_path):
    root = _repo_copy(tmp_path)
    done = _papermill(root, root / "notebooks")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (root / "notebooks" / "data").exists()
    (run_dir,) = list((root / "data" / "scratch" / "published").iterdir())
    m = runs.load_manifest(run_dir)
    assert m["outcome"] == "ok" and m["hand_run"] is True
    assert m["notebook"]["path"] == "notebooks/published.ipynb" and len(m["notebook"]["sha256"]) == 64
    assert m["parameters"] == {"transcription": "configs/published/study.yaml"}
    assert runs.verify_run(run_dir) == []


def test_a_parameter_the_notebook_does_not_declare_fails_the_run_naming_it(tmp_path):
    root = _repo_copy(tmp_path)
    done = _papermill(root, root, "transcripton=configs/published/study.yaml")
    assert done.returncode != 0
    assert "transcripton" in done.stderr and "does not declare" in done.stderr
    assert not (root / "data").exists()  # refused before any run was made


def test_a_failing_hand_run_is_kept_and_marked_failed(tmp_path):
    root = _repo_copy(tmp_path)
    done = _papermill(root, root, "transcription=configs/published/nope.yaml")
    assert done.returncode != 0
    (run_dir,) = list((root / "data" / "scratch" / "published").iterdir())
    m = runs.load_manifest(run_dir)
    assert m["outcome"] == "failed" and "nope.yaml" in (m["error"] or "")


def test_a_wrong_type_in_a_campaign_file_fails_the_check_before_any_server(tmp_path):
    data = {"name": "wrongtype", "stack": "configs/stacks/embedded.yaml", "experiments": [
        {"experiment": "context", "notebook": "notebooks/context.ipynb",
         "parameters": {"context_lengths": "long", "output_tokens": 8, "repeats": 1}}]}
    f = tmp_path / "c.yaml"
    f.write_text(json.dumps(data))
    done = subprocess.run([str(BIN / "offload-lab"), "campaign", "check", str(f)], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 2
    assert "experiment context" in done.stderr and "context_lengths" in done.stderr


def _published_run(data: Path, campaign: str, params: dict, run_id: str) -> Path:
    run = runs.new_run(data, campaign, "published", params, run_id=run_id)
    run.write_json("figures.json", [])
    run.finish("ok")
    return run.path


def test_the_paper_reads_the_run_the_campaign_file_declares_and_skips_a_hand_run_with_other_parameters(tmp_path):
    data = tmp_path / "data"
    declared = _published_run(data, "reference", {"transcription": "configs/published/study.yaml"},
                              "20261201T000000Z-aaaaaa")
    hand = _published_run(data, "reference", {"transcription": "elsewhere/study.yaml"}, "20261201T000001Z-bbbbbb")
    assert hand.name > declared.name  # the hand run is the newer one
    got = selection.select(data, "reference", {"published"}, ROOT)
    assert got.chosen == {"published": declared}
    assert got.skipped == [{"experiment": "published", "run_id": hand.name,
                            "reason": "its parameters differ from what the campaign file declares"}]


def test_injected_names_are_read_from_papermills_cell_only():
    ns = {"In": ["", "# Parameters (generated)\ncontext_lengths = [1]\n", "# Parameters\nrepeats = 2\nbogus = 1\n"]}
    assert nbmod.injected_names(ns) == {"repeats", "bogus"}
