"""SIGINT, SIGTERM and SIGHUP end a campaign the same way: the run in progress is marked stopped with the signal as
its reason, and the ledger session is closed listing it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from offload_lab.campaigns import ledger
from offload_lab.core import runs

BIN = Path(sys.executable).parent


def _campaign(tmp_path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("base_url = None\nrun_dir = None\ncampaign = 'x'\ndata_root = 'data'\n")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("import time\nprint('measuring', flush=True)\ntime.sleep(120)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "slow.ipynb")
    (tmp_path / "configs").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    f = tmp_path / "c.yaml"
    f.write_text(json.dumps({"name": "sigtest", "experiments": [
        {"experiment": "slow", "notebook": str(tmp_path / "slow.ipynb"), "needs_server": False}]}))
    return f


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_stops_the_campaign_marks_the_run_and_closes_the_ledger(tmp_path, sig):
    f = _campaign(tmp_path)
    data = tmp_path / "data"
    proc = subprocess.Popen([str(BIN / "offload-lab"), "campaign", "run", str(f), "--data-dir", str(data)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run_dirs: list[Path] = []
    for _ in range(600):  # the run directory appears once the notebook starts
        run_dirs = list((data / "sigtest" / "slow").glob("*")) if (data / "sigtest" / "slow").is_dir() else []
        if run_dirs and (run_dirs[0] / "notebook.ipynb").exists():
            break
        time.sleep(0.1)
    assert run_dirs, "the campaign never started its notebook"
    time.sleep(2.0)  # let the kernel reach the cell
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    # offload-lab's own line ends it: no kernel ZMQError, no abandoned cell's CellExecutionError (issue 23)
    assert "Traceback" not in out and "ZMQError" not in out, out
    assert out.strip().splitlines()[-1] == f"offload-lab: stopped by {signal.Signals(sig).name}"
    m = runs.load_manifest(run_dirs[0])
    assert m["outcome"] == "stopped", out
    name = signal.Signals(sig).name
    assert name in (m["error"] or "") or (sig == signal.SIGINT and "SIGINT" in (m["error"] or "")), m["error"]
    (session,) = [s for s in ledger.read_ledger(data, "sigtest")]
    assert not session.get("open") and session["outcome"] == "stopped"
    assert str(run_dirs[0]) in session["runs"]
