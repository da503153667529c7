"""Helpers for tests of the pod machinery without a pod: a fake vLLM server stack, a fake nvidia-smi, a tiny
notebook for the campaign runner."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import nbformat
import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures"

TOPO_SYS = """\
\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tSYS\t0-31,64-95\t0\t\tN/A
GPU1\tSYS\t X \t32-63,96-127\t1\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
"""

TOPO_NODE = """\
        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NODE    0-47    0               N/A
GPU1    NODE     X      0-47    0               N/A

Legend:
  X    = Self
"""

GPU_QUERY = ("0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB, 580.65.06, 00000000:01:00.0\n"
             "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB, 580.65.06, 00000000:81:00.0\n")


def fake_stack(tmp_path: Path, name: str = "fake", price: dict[str, Any] | None = None,
               plans: dict[str, Any] | None = None, **server: Any) -> Path:
    """A stack file whose server is tests/fixtures/fake_vllm.py (behaviour from $FAKE_VLLM in server.env)."""
    code = tmp_path / "fakecode"
    code.mkdir(exist_ok=True)
    shutil.copy(FIXTURES / "fake_vllm.py", code / "fake_vllm.py")
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "model.safetensors").write_bytes(b"")
    (model / "config.json").write_text('{"num_hidden_layers": 2}')
    spec: dict[str, Any] = {
        "name": name,
        "python": sys.executable,
        "model": {"path": str(model), "served_name": "fake-model"},
        "server": {"module": "fake_vllm", "ready_timeout_s": 30, "stop_timeout_s": 5,
                   "probe": {"grace_s": 5, "timeout_s": 10},
                   **server},
    }
    spec["server"]["env"] = {"PYTHONPATH": str(code), **spec["server"].get("env", {})}
    if price:
        spec["price"] = price
    if plans:
        spec["plans"] = plans
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def fake_nvidia_smi(bin_dir: Path, topo: str, query: str = GPU_QUERY) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "topo.txt").write_text(topo)
    (bin_dir / "query.txt").write_text(query)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "topo" ]; then cat {bin_dir / 'topo.txt'}; else cat {bin_dir / 'query.txt'}; fi
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def with_path(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def stand_in_notebook(path: Path, body: str) -> Path:
    """A notebook with the campaign's parameters cell and one body cell: a fast stand-in for an experiment."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('base_url = None\nrun_dir = None\ncampaign = "x"\ndata_root = "data"\n'
                                       'tag = ""')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, str(path))
    return path


def probe_notebook(path: Path) -> Path:
    """A notebook that asks the server (if any) for its models and writes what it saw: fast, no real engine."""
    return stand_in_notebook(path, (
        "import json, httpx, pathlib\n"
        "models = httpx.get(base_url + '/v1/models').json() if base_url else None\n"
        "pathlib.Path(run_dir, 'seen.json').write_text(json.dumps({'base_url': base_url, 'models': models, "
        "'tag': tag}))\n"))


def campaign_file(tmp_path: Path, spec: dict[str, Any], name: str = "campaign.yaml") -> Path:
    f = tmp_path / name
    f.write_text(yaml.safe_dump(spec))
    return f
