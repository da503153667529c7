"""The lab environment's tools: JupyterLab and nbconvert installed, the named kernel registered, and environment.yml
listing what pyproject.toml lists (dependencies and the test extra, with the same bounds)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from offload_lab.campaigns import execute

ROOT = Path(__file__).resolve().parents[1]
# Installed by conda (or pip in environment.yml) besides the package list: the interpreter, pip, Quarto, and the
# project itself.
CONDA_ONLY = {"python", "pip", "quarto"}


def _name(requirement: str) -> tuple[str, str]:
    """(normalized name, version bound) of a requirement string, PEP 503 style: ``prometheus_client>=0.20`` and
    ``prometheus-client>=0.20`` are the same."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)", requirement)
    assert m, requirement
    return re.sub(r"[-_.]+", "-", m.group(1)).lower(), m.group(3).replace(" ", "")


def _pyproject() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["test"]
    return dict(_name(r) for r in reqs)


def _environment() -> tuple[dict[str, str], list[str]]:
    doc = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in doc["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in doc["dependencies"] if isinstance(d, dict))
    local = [p for p in pip if p.startswith("-e")]
    named = dict(_name(r.replace("=", "==", 1) if re.match(r"^[^=<>!]+=[^=]", r) else r)
                 for r in conda + [p for p in pip if not p.startswith("-e")])
    return {k: v for k, v in named.items() if k not in CONDA_ONLY}, local


def test_environment_yml_lists_what_pyproject_lists() -> None:
    want, (have, local) = _pyproject(), _environment()
    assert sorted(set(want) - set(have)) == [], "in pyproject.toml, missing from environment.yml"
    assert sorted(set(have) - set(want)) == [], "in environment.yml, not in pyproject.toml"
    differ = {k: (want[k], have[k]) for k in want if want[k] != have[k]}
    assert differ == {}, "bounds differ (pyproject, environment.yml)"
    assert {"jupyterlab", "nbconvert", "papermill", "ipykernel", "pytest"} <= set(have)
    # The project itself, editable, with its test extra.
    assert local == ["-e .[test]"]


def _lab_bin() -> Path:
    lab = ROOT / ".venvs" / "lab" / "bin"
    if not (lab / "python").exists():
        pytest.skip("no lab environment (make envs)")
    return lab


def test_jupyter_and_nbconvert_are_in_the_lab_environment() -> None:
    import subprocess

    lab = _lab_bin()
    for tool in ("jupyter", "jupyter-lab", "jupyter-nbconvert"):
        assert (lab / tool).exists(), f"{tool} is not in {lab}"
    out = subprocess.run([str(lab / "jupyter"), "nbconvert", "--version"], capture_output=True, text=True, check=True)
    assert int(out.stdout.strip().split(".")[0]) >= 7
    out = subprocess.run([str(lab / "jupyter"), "lab", "--version"], capture_output=True, text=True, check=True)
    assert int(out.stdout.strip().split(".")[0]) >= 4


def test_the_named_kernel_and_the_ipc_config_are_in_the_environment() -> None:
    lab = _lab_bin()
    prefix = lab.parent
    spec = json.loads((prefix / "share" / "jupyter" / "kernels" / execute.KERNEL_NAME / "kernel.json").read_text())
    # --sys-prefix: the kernel runs this environment's interpreter, not whatever python is first on PATH.
    assert Path(spec["argv"][0]).parent == lab
    # No checkout baked in: a moved or second checkout's notebooks find their own root (core/paths.py).
    assert "OFFLOAD_LAB_ROOT" not in spec.get("env", {})
    for name in execute.JUPYTER_CONFIG_FILES:
        doc = json.loads((prefix / "etc" / "jupyter" / name).read_text())
        assert doc["KernelManager"]["transport"] == "ipc", name
        assert doc["NotebookClient"]["kernel_manager_class"] == execute.IPC_MANAGER, name


def test_write_jupyter_config_keeps_other_settings(tmp_path: Path) -> None:
    folder = tmp_path / "etc" / "jupyter"
    folder.mkdir(parents=True)
    (folder / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"port": 9999},
                                                                    "KernelManager": {"shutdown_wait_time": 3}}))
    written = execute.write_jupyter_config(tmp_path)
    assert [p.name for p in written] == list(execute.JUPYTER_CONFIG_FILES)
    doc = json.loads((folder / "jupyter_server_config.json").read_text())
    assert doc["ServerApp"] == {"port": 9999} and doc["KernelManager"]["shutdown_wait_time"] == 3
    assert doc["KernelManager"] | execute.kernel_manager_config()["KernelManager"] == doc["KernelManager"]


def test_notebooks_use_the_named_kernel() -> None:
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        spec = json.loads(nb.read_text())["metadata"].get("kernelspec", {})
        assert spec.get("name") == execute.KERNEL_NAME, f"{nb.name} says kernel {spec.get('name')!r}"
