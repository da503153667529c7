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


# --- SkyPilot's recorder (tests/fixtures/fake_sky) ------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
FAKE_SKY = FIXTURES / "fake_sky"
POD = {"accelerator": "L40S", "count": 1, "disk_gib": 50, "autodown_idle_minutes": 10}


def use_recorder(tmp_path: Path, monkeypatch: Any) -> Path:
    """SkyPilot replaced by the recorder for the adapter's interpreter; rsync from a cluster by its stand-in.
    Returns the recorder's folder (calls.jsonl, history.jsonl, clusters/)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool, script in (("rsync", "fake_rsync.py"), ("aws", "fake_aws.py")):
        shim = bin_dir / tool
        shim.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SKY / script} \"$@\"\n")
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", f"{FAKE_SKY}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("FAKE_SKY_ROOT", str(tmp_path / "sky"))
    for var in ("FAKE_SKY_PREEMPT", "FAKE_RSYNC_FAIL", "FAKE_RSYNC_FLAKY"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "sky"


def recorded(sky: Path, call: str | None = None) -> list[dict[str, Any]]:
    import json

    p = sky / "calls.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()] if p.is_file() else []
    return [r for r in rows if call is None or r["call"] == call]


def billed(sky: Path) -> list[dict[str, Any]]:
    """What the recorder billed, launch by launch (its own history, not what the launcher says)."""
    import json

    events = [json.loads(x) for x in (sky / "history.jsonl").read_text().splitlines()]
    ends = {e["cluster_hash"]: e for e in events if e["event"] == "end"}
    return [{"name": e["name"], "cluster_hash": e["cluster_hash"], "nodes": e.get("num_nodes", 1),
             "why": ends.get(e["cluster_hash"], {}).get("why"),
             "seconds": ends[e["cluster_hash"]]["at"] - e["at"] if e["cluster_hash"] in ends else None}
            for e in events if e["event"] == "launch"]


def pod_checkout(tmp: Path, experiments: str = "ab", stacks: tuple[str, ...] = ("fake",),
                 boots: list[dict[str, Any]] | None = None, campaign_stack: str = "fake",
                 pods: dict[str, dict[str, Any]] | None = None) -> Path:
    """A checkout as the pod gets it: one stack file per name (each its own server Python, `.venvs/<name>`, which
    only the pod's setup makes: the recorder's setup links it for each stack the setup installs), a campaign
    `camp.yaml` of stand-in experiments on `campaign_stack`, with optional boot attempts."""
    repo = tmp / "repo"
    (repo / "configs" / "stacks").mkdir(parents=True)
    (repo / "configs" / "campaigns").mkdir()
    (repo / "notebooks").mkdir()
    (repo / "pyproject.toml").write_text("[project]\nname = 'checkout'\n")
    (repo / ".venvs").mkdir()
    (repo / ".venvs" / "lab").symlink_to(ROOT / ".venvs" / "lab")
    probe_notebook(repo / "notebooks" / "probe.ipynb")
    for name in stacks:
        st = fake_stack(tmp, name=name, price={"per_hour": 3.0, "currency": "EUR", "what": "test pod",
                                               "source": "test"})
        spec = yaml.safe_load(st.read_text())
        spec["python"] = f".venvs/{name}/bin/python"  # made by the pod's setup (`stack install`), nowhere else
        spec["pod"] = dict((pods or {}).get(name) or POD)
        (repo / "configs" / "stacks" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    exps = [{"experiment": x, "notebook": "notebooks/probe.ipynb", "parameters": {"tag": x}} for x in experiments]
    camp: dict[str, Any] = {"name": "camp", "stack": f"configs/stacks/{campaign_stack}.yaml", "experiments": exps}
    if boots:
        camp["boots"] = boots
    (repo / "configs" / "campaigns" / "camp.yaml").write_text(yaml.safe_dump(camp))
    return repo


def ok_runs(data: Path, campaign: str = "camp") -> dict[str, int]:
    """Experiment -> how many `ok` runs the merged data holds (boot attempts apart)."""
    from offload_lab.core import runs

    out: dict[str, int] = {}
    for run_dir in runs.iter_runs(data, campaign):
        m = runs.load_manifest(run_dir)
        if m.get("outcome") == "ok" and run_dir.parent.name != "boots":
            out[run_dir.parent.name] = out.get(run_dir.parent.name, 0) + 1
    return out
