"""Hand runs that say where they went (issue 37): plain papermill and `python -m offload_lab.campaigns.execute` end by
printing the run directory, the latter keeps its output notebook there (sealed in the manifest); a base_url goes
through the check `bench --url` makes, and its secrets are printed nowhere; list parameters take `256,1024`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.experiments import notebook

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SECRET_URL = "http://alice:pw1234@127.0.0.1:8123/?api_key=sk-XYZ12345"
SECRETS = ("pw1234", "sk-XYZ12345")
NOTEBOOK = "notebooks/published.ipynb"  # a hand run that needs no server
TRANSCRIPTION = "configs/published/study.yaml"


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "configs", root / "configs")
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / NOTEBOOK, root / NOTEBOOK)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _run(root: Path, args: list[str]) -> subprocess.CompletedProcess:
    # ipykernel keeps the kernel's own stderr (the terminal) only outside pytest: as a user runs it, then.
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_LAB_ROOT", "PYTEST_CURRENT_TEST")}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return subprocess.run(args, capture_output=True, text=True, cwd=root, env=env, timeout=600)


def _run_dirs(root: Path) -> list[Path]:
    return sorted((root / "data" / "scratch" / "published").glob("*/manifest.json"))


def test_plain_papermill_prints_the_run_directory(repo: Path) -> None:
    done = _run(repo, [str(BIN / "papermill"), NOTEBOOK, "out.ipynb", "-k", "python3", "-p", "transcription",
                       TRANSCRIPTION])
    assert done.returncode == 0, done.stderr[-2000:]
    (manifest,) = _run_dirs(repo)
    said = [ln for ln in done.stderr.replace("\r", "\n").splitlines() if ln.startswith("run directory:")]
    assert said == [f"run directory: {manifest.parent} (ok)"]


def test_execute_prints_the_run_directory_and_keeps_the_notebook_in_it(repo: Path) -> None:
    done = _run(repo, [sys.executable, "-m", "offload_lab.campaigns.execute", NOTEBOOK, "out.ipynb",
                       "-p", f"transcription={TRANSCRIPTION}"])
    assert done.returncode == 0, done.stderr[-2000:]
    (manifest,) = _run_dirs(repo)
    run_dir = manifest.parent
    assert f"run directory: {run_dir}" in done.stderr
    assert f"output notebook kept in the run directory: {run_dir / 'notebook.ipynb'}" in done.stdout
    assert (run_dir / "notebook.ipynb").read_bytes() == (repo / "out.ipynb").read_bytes()
    m = runs.load_manifest(run_dir)
    assert m["notebook"]["output"] == "notebook.ipynb" and m["hand_run"]
    assert runs.verify_run(run_dir) == []  # sealed in the manifest like the rest of the run


@pytest.mark.parametrize("how", ["papermill", "execute"])
def test_a_url_with_secrets_is_refused_as_bench_url_refuses_it_and_printed_nowhere(repo: Path, how: str) -> None:
    if how == "papermill":
        args = [str(BIN / "papermill"), NOTEBOOK, "out.ipynb", "-k", "python3", "-p", "transcription",
                TRANSCRIPTION, "-p", "base_url", SECRET_URL]
    else:
        args = [sys.executable, "-m", "offload_lab.campaigns.execute", NOTEBOOK, "out.ipynb",
                "-p", f"transcription={TRANSCRIPTION}", "-p", f"base_url={SECRET_URL}"]
    done = _run(repo, args)
    assert done.returncode != 0
    printed = done.stdout + done.stderr
    assert "holds a query or fragment" in printed and "127.0.0.1:8123" in printed
    assert not any(s in printed for s in SECRETS)
    assert _run_dirs(repo) == []  # refused before any run was made
    if (repo / "out.ipynb").is_file():
        # Papermill itself writes the parameters it injects into the output notebook; what ran never shows them.
        nb = json.loads((repo / "out.ipynb").read_text())
        outputs = json.dumps([c.get("outputs", []) for c in nb["cells"]])
        assert "holds a query or fragment" in outputs and not any(s in outputs for s in SECRETS)


def test_execute_keeps_a_urls_credentials_out_of_the_output_notebook(repo: Path) -> None:
    """Through the kernel's environment: the notebook and every line printed show the URL redacted."""
    done = _run(repo, [sys.executable, "-m", "offload_lab.campaigns.execute", NOTEBOOK, "out.ipynb",
                       "-p", f"transcription={TRANSCRIPTION}", "-p", "base_url=http://alice:pw1234@127.0.0.1:9"])
    assert done.returncode == 4  # nothing answers on port 9: the notebook fails, naming the server
    printed = done.stdout + done.stderr
    assert "pw1234" not in printed and "127.0.0.1:9" in printed
    assert "pw1234" not in (repo / "out.ipynb").read_text()


def test_a_notebooks_url_has_the_same_check_as_bench_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from offload_lab.cli.main import main

    monkeypatch.delenv("OFFLOAD_LAB_SERVER_URL", raising=False)
    with pytest.raises(InputError, match="query or fragment") as caught:
        notebook.hand_url(SECRET_URL)
    assert not any(s in str(caught.value) for s in SECRETS)
    with pytest.raises(InputError, match="OFFLOAD_LAB_SERVER_URL"):
        notebook.hand_url("http://alice:pw1234@127.0.0.1:8123")
    with pytest.raises(InputError, match="not an http"):
        notebook.hand_url("127.0.0.1:8123")
    assert notebook.hand_url("http://127.0.0.1:8123") == "http://127.0.0.1:8123"
    # The whole URL from the environment, base_url left out.
    monkeypatch.setenv("OFFLOAD_LAB_SERVER_URL", "http://alice:pw1234@127.0.0.1:8123")
    assert notebook.hand_url(None) == "http://alice:pw1234@127.0.0.1:8123"
    assert main(["bench", "--url", SECRET_URL]) == 2


def test_list_parameters_take_commas_as_well_as_json() -> None:
    for text in ("256,1024", "[256, 1024]", "256, 1024"):
        params = notebook.validate_params("context", {"context_lengths": text}, "notebooks/context.ipynb")
        assert params.context_lengths == [256, 1024], text
    with pytest.raises(InputError, match=r"256,1024 or \[256, 1024\]"):
        notebook.validate_params("context", {"context_lengths": "many"}, "notebooks/context.ipynb")
