"""`offload-lab pod launch` against SkyPilot's API boundary replaced by a recorder (tests/fixtures/fake_sky): the
real adapter (pods/sky_adapter.py) runs with an interpreter whose `sky` is the recorder, which runs each task's `run`
script in a work directory laid out as SkyPilot lays it. A campaign split over three pods, one preempted
mid-campaign and launched again for what it had left, merged, analysed here, its paper built; every launch priced.
No cloud has run this: the first real launch is its real test (docs/runbook.md)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from offload_lab.campaigns import ledger
from offload_lab.cli.main import main
from offload_lab.core import runs

from paper_fixtures import TINY_CONFIG
from pod_helpers import fake_stack, probe_notebook, stand_in_notebook

ROOT = Path(__file__).resolve().parents[1]
FAKE_SKY = ROOT / "tests" / "fixtures" / "fake_sky"


def _checkout(tmp: Path) -> Path:
    """A checkout as the pod gets it: configs, a notebook, a stack with `pod:`, the lab environment (linked)."""
    repo = tmp / "repo"
    (repo / "configs" / "stacks").mkdir(parents=True)
    (repo / "configs" / "campaigns").mkdir()
    (repo / "notebooks").mkdir()
    (repo / "pyproject.toml").write_text("[project]\nname = 'checkout'\n")
    (repo / ".venvs").mkdir()
    (repo / ".venvs" / "lab").symlink_to(ROOT / ".venvs" / "lab")
    probe_notebook(repo / "notebooks" / "probe.ipynb")
    st = fake_stack(tmp, price={"per_hour": 3.73, "currency": "EUR", "what": "test pod", "source": "test"},
                    args=["--max-model-len", "2048"])  # the paper reads it from each boot
    (tmp / "model" / "config.json").write_text(json.dumps(TINY_CONFIG))  # what the paper reads of the model
    spec = yaml.safe_load(st.read_text())
    spec["pod"] = {"accelerator": "L40S", "count": 1, "disk_gib": 50, "autodown_idle_minutes": 10}
    (repo / "configs" / "stacks" / "fake.yaml").write_text(yaml.safe_dump(spec))
    exps = [{"experiment": x, "notebook": "notebooks/probe.ipynb", "parameters": {"tag": x}} for x in "abcd"]
    exps.append({"experiment": "e", "notebook": "notebooks/probe.ipynb", "needs_server": False})
    (repo / "configs" / "campaigns" / "split.yaml").write_text(yaml.safe_dump(
        {"name": "split", "stack": "configs/stacks/fake.yaml", "experiments": exps}))
    return repo


@pytest.fixture
def recorder(tmp_path, monkeypatch):
    """SkyPilot replaced by the recorder for the adapter's interpreter; rsync from a cluster by its stand-in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "rsync"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SKY / 'fake_rsync.py'} \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", f"{FAKE_SKY}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("FAKE_SKY_ROOT", str(tmp_path / "sky"))
    return tmp_path / "sky"


def _calls(sky: Path) -> list[dict]:
    return [json.loads(x) for x in (sky / "calls.jsonl").read_text().splitlines()]


def test_three_pods_one_preempted_resumed_merged_and_the_paper(tmp_path, recorder, monkeypatch, capsys):
    repo = _checkout(tmp_path)
    monkeypatch.setenv("FAKE_SKY_PREEMPT", "ol-split-t1-2@d")  # pod 3 runs c, d: lost when it starts d
    plan_dir, data = tmp_path / "plan", tmp_path / "merged"
    code = main(["pod", "launch", str(repo / "configs/campaigns/split.yaml"), "--pods", "3", "--plan-id", "t1",
                 "--out", str(plan_dir), "--data-dir", str(data), "--sky-python", sys.executable, "--paper"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    # progress: the campaign's own lines from each pod, named by cluster
    assert "[ol-split-t1-0] a: ok after" in out and "[ol-split-t1-2] c: ok after" in out
    assert "[ol-split-t1-2] launch 0 lost (cluster gone" in out
    calls = _calls(recorder)
    launched = [c["cluster"] for c in calls if c["call"] == "launch"]
    assert sorted(launched) == ["ol-split-t1-0", "ol-split-t1-1", "ol-split-t1-2", "ol-split-t1-2"]
    # the relaunch runs only what the lost pod's fetched data lacks: c came home before the pod was lost
    relaunch = yaml.safe_load((plan_dir / "ol-split-t1-2.r1.yaml").read_text())
    assert "--only d" in relaunch["run"] and relaunch["name"] == "ol-split-t1-2"
    # every pod still up at its end is taken down; the lost one was gone already
    assert sorted(c["cluster"] for c in calls if c["call"] == "down") == [
        "ol-split-t1-0", "ol-split-t1-1", "ol-split-t1-2"]
    # merged: one ok run of every server experiment (c not run twice), the analysis here after the merge
    ok = {}
    for run_dir in runs.iter_runs(data, "split"):
        m = runs.load_manifest(run_dir)
        if m.get("outcome") == "ok" and run_dir.parent.name != "boots":
            ok.setdefault(run_dir.parent.name, []).append(m)
    assert {k: len(v) for k, v in ok.items()} == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}
    # every launch priced, the relaunch of the same cluster name its own line
    pods = ledger.read_pods(data, "split")
    assert len(pods) == 4 and all(p["open"] is False and p["cost"] > 0 for p in pods)
    assert len({p["launch"] for p in pods if p["cluster"] == "ol-split-t1-2"}) == 2
    report = json.loads((plan_dir / "cost-report.json").read_text())
    assert sum(p["cost"] for p in pods) == pytest.approx(sum(r["total_cost"] for r in report), abs=1e-3)  # 4 decimals
    # the sessions say which plan and part ran them; the analysis session is not priced as a pod
    sessions = ledger.read_ledger(data, "split")
    assert {s["pod"]["part"] for s in sessions if s["pod"]["plan"] == "t1"} == {"1/3", "2/3", "3/3"}
    assert [s["price"] for s in sessions if s["pod"]["plan"] is None] == [None]
    # the paper of the merged campaign, built here
    pdf = Path(next(line for line in out.splitlines() if line.startswith("paper: ")).split(": ", 1)[1])
    assert pdf.is_file() and pdf.suffix == ".pdf"
    # launching the finished plan again launches nothing
    assert main(["pod", "launch", str(plan_dir), "--data-dir", str(data), "--sky-python", sys.executable,
                 "--no-analysis"]) == 0
    assert "0 pod(s) to launch" in capsys.readouterr().out


def _timing_notebook(path: Path) -> Path:
    """A stand-in for the context experiment: request events with a TPOT per request, written into its run."""
    return stand_in_notebook(path, (
        "import json, pathlib, random\n"
        "rng = random.Random()\n"
        "with open(pathlib.Path(run_dir, 'events.jsonl'), 'w') as f:\n"
        "    for ctx in (256, 1024):\n"
        "        for _ in range(8):\n"
        "            f.write(json.dumps({'kind': 'request', 'ok': True, 'context_tokens': ctx,\n"
        "                                'tpot_ms': 5 + rng.random()}) + '\\n')\n"))


def test_a_repeat_boot_split_over_three_pods_pools_their_boots(tmp_path, recorder, capsys):
    """Each pod boots once; after the merge, boot_spread reads the plan's three boots, not an older session with two
    that every pod carried back in the checkout's data."""
    from offload_lab.experiments.boot_spread import runner as spread

    repo = _checkout(tmp_path)
    _timing_notebook(repo / "notebooks" / "timing.ipynb")
    (repo / "notebooks" / "boot_spread.ipynb").write_bytes((ROOT / "notebooks" / "boot_spread.ipynb").read_bytes())
    (repo / "configs" / "campaigns" / "repeat.yaml").write_text(yaml.safe_dump({
        "name": "rep", "stack": "configs/stacks/fake.yaml", "repeat_boots": 3, "experiments": [
            {"experiment": "context_repeat", "notebook": "notebooks/timing.ipynb"},
            {"experiment": "boot_spread", "notebook": "notebooks/boot_spread.ipynb", "needs_server": False,
             "parameters": {"experiment": "context_repeat", "metrics": ["tpot_ms"], "permutations": 200}}]}))
    # committed data in the checkout: an older session with two boots, carried to every pod and back
    old = repo / "data"
    for i in range(2):
        run = runs.new_run(old, "rep", "context_repeat", {}, session="old-session",
                           boot={"index": i, "of": 2, "run": f"/old/boots/boot{i}"})
        with run.events("events.jsonl") as log:
            for ctx in (256, 1024):
                for _ in range(8):
                    log.append({"kind": "request", "ok": True, "context_tokens": ctx, "tpot_ms": 50.0 + i})
        run.finish("ok")
    ledger.start_session(old, "rep", {}, None)
    plan_dir, data = tmp_path / "plan", tmp_path / "merged"
    code = main(["pod", "launch", str(repo / "configs/campaigns/repeat.yaml"), "--pods", "3", "--plan-id", "t2",
                 "--out", str(plan_dir), "--data-dir", str(data), "--sky-python", sys.executable])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    plan = json.loads((plan_dir / "plan.json").read_text())["plan"]
    assert [p["repeat_boots"] for p in plan["parts"]] == [1, 1, 1] and plan["after_merge"] == ["boot_spread"]
    [analysis] = [runs.load_manifest(d) for d in runs.iter_runs(data, "rep", "boot_spread")]
    assert analysis["outcome"] == "ok"
    read = analysis["analysed"]
    assert read["plan"] == "t2" and read["pods"] == ["1/3", "2/3", "3/3"]
    assert len({r["boot_run"] for r in read["runs"]}) == 3 and "old-session" not in read["sessions"]
    table = spread.analyze(data, "rep", spread.SpreadParams(plan="t2", metrics=["tpot_ms"], permutations=200))[1]
    assert (table["boots"] == 3).all() and (table["pods"] == 3).all() and table["between_pod_sd"].notna().all()
    assert table["between_boot_within_pod_sd"].isna().all()  # one boot per pod: no boot-to-boot within a pod


def test_launch_refuses_before_renting(tmp_path, recorder, capsys, monkeypatch):
    """A secret the tasks pass that is not set here, and spot pods without a bucket: exit 2, nothing launched."""
    repo = _checkout(tmp_path)
    campaign = repo / "configs" / "campaigns" / "split.yaml"
    spec = yaml.safe_load(campaign.read_text())
    import nbformat

    nb = nbformat.read(str(repo / "notebooks" / "probe.ipynb"), as_version=4)
    nb.cells[0].source += "\nreference = None"
    nbformat.write(nb, str(repo / "notebooks" / "keyed.ipynb"))
    spec["experiments"][0].update(notebook="notebooks/keyed.ipynb", parameters={
        "reference": {"url": "https://api.deepseek.com", "kind": "deepseek"}})
    keyed = repo / "configs" / "campaigns" / "keyed.yaml"
    keyed.write_text(yaml.safe_dump(spec))
    monkeypatch.delenv("OFFLOAD_LAB_REFERENCE_API_KEY", raising=False)
    args = ["--sky-python", sys.executable, "--data-dir", str(tmp_path / "d")]
    assert main(["pod", "launch", str(keyed), "--out", str(tmp_path / "p1"), *args]) == 2
    assert "OFFLOAD_LAB_REFERENCE_API_KEY" in capsys.readouterr().err
    stack = repo / "configs" / "stacks" / "fake.yaml"
    st = yaml.safe_load(stack.read_text())
    st["pod"]["use_spot"] = True
    stack.write_text(yaml.safe_dump(st))
    assert main(["pod", "launch", str(campaign), "--out", str(tmp_path / "p2"), *args]) == 2
    assert "give --bucket NAME" in capsys.readouterr().err
    assert not (recorder / "calls.jsonl").exists()


SKY_PY = ROOT / ".venvs" / "sky" / "bin" / "python"


@pytest.mark.skipif(not SKY_PY.exists(), reason=f"no SkyPilot environment at {SKY_PY}: `make sky-env` creates it")
def test_the_adapter_against_skypilots_installed_api(tmp_path):
    """The calls the launcher makes, into SkyPilot 0.14.1's real client SDK and a local API server it starts (no
    cloud: an unknown cluster, an empty cost report). Launching cannot be tried without a cloud."""
    import subprocess

    from offload_lab.pods.launch import Adapter, LaunchError

    env = {**os.environ, "HOME": str(tmp_path), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    adapter = Adapter(SKY_PY, env=env)
    try:
        assert adapter.call("cost_report", {"days": 30}) == {"records": []}
        assert adapter.call("status", {"cluster": "ol-none-0", "job_id": 1}) == {"cluster_status": None,
                                                                                 "job_status": None}
        with pytest.raises(LaunchError, match="ClusterDoesNotExist: Cluster 'ol-none-0' does not exist"):
            adapter.call("down", {"cluster": "ol-none-0"})
        with pytest.raises(LaunchError, match="does not exist"):
            adapter.call("tail", {"cluster": "ol-none-0", "job_id": 1})
    finally:
        subprocess.run([str(SKY_PY.parent / "sky"), "api", "stop"], env=env, capture_output=True, timeout=120)
