"""Adding an experiment is one folder, one notebook and a campaign entry (issue 22): a throwaway experiment added to a
copy of the package and the repository runs through the campaign runner, and the paper and the explore notebook show
it, with nothing else edited. docs/adding-an-experiment.md walks through the same files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NAME = "short_burst"

# The folder: parameters, runner, one claim, one figure, its prose, its explore table. No server (needs_server: false).
FOLDER = {
    "__init__.py": '"""A throwaway experiment: N short prompts, their lengths in tokens (no server)."""\n',
    "params.py": """
        from pydantic import BaseModel, ConfigDict, Field


        class Params(BaseModel):
            model_config = ConfigDict(extra="forbid")

            prompts: int = Field(3, ge=1, description="how many short prompts")
    """,
    "runner.py": """
        import pandas as pd

        EXPERIMENT = "short_burst"
        BURST = "burst.csv"


        def run_experiment(run, base_url, params):
            frame = pd.DataFrame({"prompt": range(1, params.prompts + 1),
                                  "tokens": [7 * (i + 1) for i in range(params.prompts)]})
            run.write_table(BURST, frame)
            return {"prompts": params.prompts}
    """,
    "claims.py": """
        import functools

        from offload_lab.experiments.short_burst.runner import BURST, EXPERIMENT
        from offload_lab.paper.claims import ClaimDef, Sources
        from offload_lab.paper.claims import claim as _claim
        from offload_lab.paper.formats import fmt_int

        SECTION: dict[str, ClaimDef] = {}
        claim = functools.partial(_claim, registry=SECTION)


        @claim("short_burst.total_tokens", experiment=EXPERIMENT, files=[BURST], fmt=fmt_int, unit="tokens")
        def _total(src: Sources) -> int:
            \"\"\"Tokens of every prompt of the burst together.\"\"\"
            return int(src.csv(BURST)["tokens"].sum())
    """,
    "figures.py": """
        import functools
        from typing import Any

        from offload_lab.experiments.short_burst.runner import BURST, EXPERIMENT
        from offload_lab.paper.claims import Sources
        from offload_lab.paper.figures import FigureDef
        from offload_lab.paper.figures import figure as _figure

        SECTION: dict[str, FigureDef] = {}
        figure = functools.partial(_figure, registry=SECTION)


        @figure("short_burst_tokens", experiment=EXPERIMENT, files=[BURST])
        def short_burst_tokens(src: Sources, ax: Any) -> None:
            \"\"\"Tokens per prompt of the burst.\"\"\"
            frame = src.csv(BURST)
            ax.bar(frame["prompt"], frame["tokens"])
            ax.set_xlabel("prompt")
            ax.set_ylabel("tokens")
    """,
    "section.qmd": """
        ---
        section:
          topic: short-burst
          heading: "A short burst {#sec-short-burst}"
          order: 75
        ---

        The burst's prompts came to {{< claim short_burst.total_tokens >}} tokens in all (@fig-short-burst).

        ![Tokens per prompt of the burst.](_generated/figures/short_burst_tokens.svg){#fig-short-burst}
    """,
    "explore.py": """
        from offload_lab.paper.explore import csv

        TABLES = {"burst": csv("burst.csv")}
        COMPARE = [("burst", "tokens", "prompt")]
    """,
    # How a rehearsal prices it on the real pod: each prompt once, one request at a time, eight tokens of reply.
    "rehearsal.py": """
        from offload_lab.emulate.workload_time import reply_seconds


        def pod_seconds(model, params):
            return sum(reply_seconds(model, 7 * (i + 1), 8) for i in range(params["prompts"]))
    """,
}

NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "id": "sb-intro", "metadata": {}, "source": "# A short burst\n"},
        {"cell_type": "code", "execution_count": None, "id": "sb-params", "metadata": {"tags": ["parameters"]},
         "outputs": [], "source": ""},
        {"cell_type": "code", "execution_count": None, "id": "sb-run", "metadata": {}, "outputs": [],
         "source": "from offload_lab.experiments import notebook\nfrom offload_lab.experiments.short_burst import runner\n\n"
                   "with notebook.running(\"short_burst\", globals()) as nr:\n"
                   "    summary = runner.run_experiment(nr.run, nr.base_url, nr.params)\nsummary"},
    ],
    "metadata": {"kernelspec": {"display_name": "Python (offload-lab)", "language": "python", "name": "offload-lab"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def _copy(tmp: Path) -> Path:
    """The repository as a user has it (package, configs, notebooks, paper), the package importable from the copy."""
    repo = tmp / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "_generated", "*.egg-info")
    shutil.copytree(ROOT / "src", repo / "src", ignore=ignore)
    for d in ("configs", "paper", "_extensions", "notebooks"):
        shutil.copytree(ROOT / d, repo / d, ignore=ignore)
    for f in ("pyproject.toml", "_quarto.yml"):
        shutil.copy2(ROOT / f, repo / f)
    return repo


def _kernel(tmp: Path) -> Path:
    """A Jupyter path whose project kernel runs this interpreter with no root baked in, so that the notebook imports
    the copied package (PYTHONPATH) and works in the copied repository."""
    spec = tmp / "jupyter" / "kernels" / "offload-lab"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (offload-lab)", "language": "python"}))
    return tmp / "jupyter"


def _run(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "offload_lab.cli.main", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_a_new_experiment_is_one_folder_one_notebook_and_a_campaign_entry(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    folder = repo / "src" / "offload_lab" / "experiments" / NAME
    folder.mkdir()
    for name, text in FOLDER.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    (repo / "notebooks" / f"{NAME}.ipynb").write_text(json.dumps(NOTEBOOK, indent=1))
    campaign = repo / "configs" / "campaigns" / "embedded.yaml"
    spec = yaml.safe_load(campaign.read_text())
    spec["experiments"].append({"experiment": NAME, "notebook": f"notebooks/{NAME}.ipynb", "needs_server": False,
                                "parameters": {"prompts": 4}})
    campaign.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_LAB_ROOT", "OFFLOAD_LAB_DATA_ROOT",
                                                             "OFFLOAD_LAB_CAMPAIGN")}
    env.update(PYTHONPATH=str(repo / "src"), JUPYTER_PATH=str(_kernel(tmp_path)), PATH=f"{BIN}:{env.get('PATH', '')}")

    # The notebook's parameters cell is generated from the folder's Params and the campaign's values.
    _run(repo, env, "notebooks", "sync")
    cell = json.loads((repo / "notebooks" / f"{NAME}.ipynb").read_text())["cells"][1]
    assert "prompts: int = 4" in "".join(cell["source"])

    data = tmp_path / "data"
    _run(repo, env, "campaign", "run", str(campaign), "--only", NAME, "--quiet", "--data-dir", str(data))
    (run_dir,) = (data / "embedded" / NAME).iterdir()
    assert json.loads((run_dir / "manifest.json").read_text())["outcome"] == "ok"

    out = tmp_path / "paper"
    _run(repo, env, "paper", "build", "--campaign", "embedded", "--data-dir", str(data), "--out", str(out))
    claims = json.loads((out / "claims.json").read_text())["claims"]
    assert claims["short_burst.total_tokens"]["text"] == "70"  # 7 + 14 + 21 + 28
    html = (out / "paper.html").read_text()
    # Its figure is in the page (inlined, so looked up by its cross-reference id, not its file name).
    assert "A short burst" in html and "in all" in html and 'id="fig-short-burst"' in html
    assert "Figure" in html  # its figure is numbered and cross-referenced

    # The explore notebook's reader finds its table and its comparison.
    probe = ("import json, sys; from offload_lab.paper import explore; "
             f"t = explore.load_campaign('embedded', {str(data)!r}); "
             "print(json.dumps({'rows': len(t.burst), 'compare': [title for title, _ in explore.side_by_side(t)], "
             f"'plot': explore.plot(t, {NAME!r}) is not None}}))")
    shown = json.loads(subprocess.run([sys.executable, "-c", probe], env=env, cwd=repo, capture_output=True, text=True,
                                      check=True).stdout)
    assert shown == {"rows": 4, "compare": ["burst: tokens by prompt, one column per run, named by what differs"],
                     "plot": True}

    # The rehearsal costs it from its own folder, at the pod model's pace (it names no experiment itself).
    probe = ("from offload_lab.campaigns import rehearse_cost as rc; from offload_lab.emulate.podmodel import "
             "load_pod_model; m = load_pod_model('configs/pods/study-published.yaml'); "
             f"a, b = (rc.model_seconds(m, {NAME!r}, {{'prompts': n}}) for n in (2, 4)); print(0 < a < b)")
    costed = subprocess.run([sys.executable, "-c", probe], env=env, cwd=repo, capture_output=True, text=True)
    assert costed.stdout.strip() == "True", costed.stderr[-2000:]
