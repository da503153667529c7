"""Notebooks as a researcher runs them by hand (issue 23): plain papermill shows the run's figures inline and no kernel
transport warning; a wrong `-p` ends with offload-lab's one line; `-p` takes lists as JSON or YAML text; a hand run's
manifest records the server it measured (redacted), and a server that does not answer is named with papermill's
parameter, not the command line's flag."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from offload_lab.core.errors import ServerError
from offload_lab.experiments import notebook

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WARNING = "without encryption"


def _repo_copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "configs", root / "configs")
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "published.ipynb", root / "notebooks" / "published.ipynb")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _papermill(root: Path, *params: str, yaml_text: str | None = None) -> subprocess.CompletedProcess:
    # ipykernel's python3 kernel: the project's own pins the checkout it was installed from. Its kernelspec in this
    # environment names the same provisioner (`--write-jupyter-config`).
    args = [str(BIN / "papermill"), "notebooks/published.ipynb", "out.ipynb", "-k", "python3"]
    for p in params:
        args += ["-p", *p.split("=", 1)]
    if yaml_text is not None:
        args += ["-y", yaml_text]
    env = {k: v for k, v in os.environ.items() if k != "OFFLOAD_LAB_ROOT"}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return subprocess.run(args, capture_output=True, text=True, cwd=root, env=env, timeout=600)


def test_plain_papermill_with_yaml_parameters_shows_the_figures_inline_without_a_kernel_warning(tmp_path: Path) -> None:
    root = _repo_copy(tmp_path)
    done = _papermill(root, yaml_text="transcription: configs/published/study.yaml")  # -y: typed parameters at once
    assert done.returncode == 0, done.stderr[-2000:]
    assert WARNING not in done.stderr
    nb = json.loads((root / "out.ipynb").read_text())
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    assert any({"image/png", "image/svg+xml"} & set(o.get("data", {})) for o in outputs)
    assert not any("PosixPath" in json.dumps(o) for o in outputs)


def test_a_wrong_parameter_ends_with_one_line(tmp_path: Path) -> None:
    root = _repo_copy(tmp_path)
    done = _papermill(root, "transcripton=configs/published/study.yaml")
    assert done.returncode != 0
    last = [ln for ln in done.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("InputError: ") and "transcripton" in last and "-p" in last
    assert "---->" not in done.stderr  # no traceback through the library in the kernel


def test_list_parameters_may_be_json_or_yaml_text() -> None:
    for text in ("[256, 1024]", "[256,1024]", "- 256\n- 1024"):
        params = notebook.validate_params("context", {"context_lengths": text}, "test")
        assert params.context_lengths == [256, 1024]
    with pytest.raises(Exception, match="context_lengths"):
        notebook.validate_params("context", {"context_lengths": "long"}, "test")


@pytest.fixture
def models_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"data": [{"id": "tiny"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_hand_run_records_the_redacted_url_and_names_papermills_parameter(models_server: str) -> None:
    with_secret = models_server.replace("http://", "http://user:hunter2@")
    record = notebook._hand_server(with_secret)
    assert record is not None and record["model"] == "tiny" and "hunter2" not in json.dumps(record)
    assert record["url"].endswith(models_server.split("//")[1])
    with pytest.raises(ServerError) as caught:
        notebook._hand_server("http://127.0.0.1:9")
    assert "-p url " in str(caught.value) and "--url" not in str(caught.value)


def test_a_run_without_a_paper_figure_still_gets_a_picture(tmp_path: Path) -> None:
    """cached_prefix's one-row table has nothing to draw: its requests' latencies are drawn instead."""
    from offload_lab.core import runs

    run = runs.new_run(tmp_path, "c", "cached_prefix", {})
    run.write_table("levels.csv", __import__("pandas").DataFrame([{"streams": 4, "tok_s_median": 12.5}]))
    with run.events("events.jsonl") as log:
        for i in range(8):
            log.append({"kind": "request", "ok": True, "ttft_s": 0.03 + i / 1000, "tpot_ms": 5.0 + i / 10})
    fig = notebook._table_picture(run.path, "cached_prefix")
    assert fig is not None
    assert [ax.get_xlabel() for ax in fig.axes] == ["time to first token (s)", "time per output token (ms)"]


def test_the_environments_kernelspecs_name_the_provisioner_and_it_is_registered() -> None:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.provisioning.factory import KernelProvisionerFactory

    from offload_lab.campaigns import execute

    specs = KernelSpecManager().get_all_specs()
    for name in (execute.KERNEL_NAME, "python3"):
        meta = specs[name]["spec"]["metadata"]
        assert meta["kernel_provisioner"]["provisioner_name"] == execute.PROVISIONER, name
    assert KernelProvisionerFactory.instance()._check_availability(execute.PROVISIONER)
