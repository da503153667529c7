"""`offload-lab pod launch` against the recorder (tests/fixtures/fake_sky) with the races real SkyPilot has: the
right stack on every pod, no teardown before the data is home, a resume that re-attaches, one transient fetch
failure and a preemption, a preemption during a fetch. Each asserts: no run lost, no experiment run twice, every
launch priced as the recorder billed it. No vLLM: the server is tests/fixtures/fake_vllm.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from offload_lab.campaigns import ledger
from offload_lab.cli.main import main
from offload_lab.core import runs
from offload_lab.pods import launch as launchmod

from pod_helpers import POD, ROOT, billed, ok_runs, pod_checkout, recorded, use_recorder


@pytest.fixture
def sky(tmp_path, monkeypatch):
    monkeypatch.setattr(launchmod, "FETCH_BACKOFF_S", 0.05)  # the retries' waits, not their number, shortened
    monkeypatch.setattr(launchmod, "BUDGET_CHECK_S", 0.5)
    return use_recorder(tmp_path, monkeypatch)


def _launch(repo: Path, tmp: Path, *extra: str, plan_id: str = "t1") -> int:
    return main(["pod", "launch", str(repo / "configs/campaigns/camp.yaml"), "--plan-id", plan_id,
                 "--out", str(tmp / "plan"), "--data-dir", str(tmp / "merged"), "--sky-python", sys.executable,
                 *extra])


def _priced_as_billed(sky: Path, data: Path) -> list[dict]:
    """Every launch the recorder billed has one closed ledger line with its minutes and cost (2.00 an hour a node)."""
    pods = ledger.read_pods(data, "camp")
    bill = {b["cluster_hash"]: b for b in billed(sky)}
    assert sorted(p["launch"] for p in pods) == sorted(bill)
    for p in pods:
        b = bill[p["launch"]]
        assert p["open"] is False and p["source"] == "launcher"
        assert p["minutes"] == pytest.approx(b["seconds"] / 60, abs=0.01)
        assert p["cost"] == pytest.approx(b["seconds"] / 3600 * 2.0 * b["nodes"], abs=1e-3)
    return pods


# --- 1, 2: the stack the plan rents, every stack the part boots ---------------------------------------------------

def test_the_pod_runs_the_planned_stack_and_installs_every_stack_it_boots(tmp_path, sky, capsys):
    """Before: the pod installed --stack and ran the campaign's own stack (no server Python: exit 2 on the pod after
    setup was paid), and a boot on another stack aborted the campaign. After: setup installs both stacks the part
    boots, the campaign runs on the planned one."""
    repo = pod_checkout(tmp_path, experiments="a", stacks=("fake", "fake2", "uva"),
                        boots=[{"name": "plain"}, {"name": "other", "stack": "configs/stacks/uva.yaml"}])
    code = _launch(repo, tmp_path, "--stack", str(repo / "configs/stacks/fake2.yaml"))
    out, err = capsys.readouterr()
    assert code == 0, out + err
    [setup] = recorded(sky, "setup")
    assert setup["stacks"] == ["configs/stacks/fake2.yaml", "configs/stacks/uva.yaml"]
    data = tmp_path / "merged"
    assert ok_runs(data) == {"a": 1}
    started = [runs.load_manifest(d) for d in runs.iter_runs(data, "camp", "boots")]
    attempts = {m["parameters"]["boot"]: m["stack"]["spec"]["name"] for m in started if m["parameters"].get("boot")}
    assert attempts == {"plain": "fake2", "other": "uva"} and all(m["outcome"] == "ok" for m in started)
    [a] = [runs.load_manifest(d) for d in runs.iter_runs(data, "camp", "a")]
    assert a["stack"]["spec"]["name"] == "fake2"  # the campaign's server: the planned stack, not camp.yaml's
    _priced_as_billed(sky, data)


def test_plan_refuses_a_boot_on_another_machine_before_renting(tmp_path, sky, capsys):
    repo = pod_checkout(tmp_path, experiments="a", stacks=("fake", "big"),
                        boots=[{"name": "big", "stack": "configs/stacks/big.yaml"}],
                        pods={"big": {"accelerator": "B300", "count": 2, "disk_gib": 50}})
    assert main(["pod", "plan", str(repo / "configs/campaigns/camp.yaml"), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "boots configs/stacks/big.yaml, made for 1 x B300:2" in err and "1 x L40S:1" in err
    assert not (tmp_path / "p").exists() and not recorded(sky)
    # a part without that boot is fine: --only a
    assert main(["pod", "plan", str(repo / "configs/campaigns/camp.yaml"), "--out", str(tmp_path / "p"),
                 "--only", "a"]) == 0


# --- 3: no teardown before the data is home -------------------------------------------------------------------------

def test_a_cluster_whose_data_cannot_come_home_is_left_up_then_reattached(tmp_path, sky, capsys, monkeypatch):
    """Before: the final fetch failed, the cluster was downed anyway, the runs of a and b lost, and the resume ran
    them again on new pods. After: left up, named, recorded; the resume re-attaches, fetches, takes it down."""
    repo = pod_checkout(tmp_path, experiments="ab")
    monkeypatch.setenv("FAKE_RSYNC_FAIL", "ol-camp-t1-0@0")  # every fetch fails
    assert _launch(repo, tmp_path) == 4
    out = capsys.readouterr().out
    assert "[ol-camp-t1-0] NOT TAKEN DOWN: its data could not be fetched" in out
    assert "ol-camp-t1-0: LEFT UP, its data is not home" in out
    assert not recorded(sky, "down")
    events = [json.loads(x) for x in (tmp_path / "plan" / "launches.jsonl").read_text().splitlines()]
    assert [e["why"] for e in events if e["event"] == "left_up"][0].startswith("its data could not be fetched")
    fails = [e for e in events if e["event"] == "fetch_failed"]
    assert {e["attempt"] for e in fails} == set(range(1, launchmod.FETCH_TRIES + 1))  # each fetch retried
    [line] = ledger.read_pods(tmp_path / "merged", "camp")
    assert line["open"] is True and line["left_up"].startswith("its data could not be fetched")
    # the operator's view: status names it and the cost so far; down refuses while its data is not home
    plan = str(tmp_path / "plan")
    assert main(["pod", "status", plan, "--sky-python", sys.executable, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    [pod] = status["pods"]
    assert pod["cluster_status"] == "UP" and pod["job_status"] == "SUCCEEDED" and pod["left_up"]
    assert pod["home_ok"] == [] and pod["left"] == ["a", "b"] and status["cost_so_far"]["USD"] > 0
    assert main(["pod", "logs", "ol-camp-t1-0", "--plan", plan, "--sky-python", sys.executable]) == 0
    assert '"experiment": "b"' in capsys.readouterr().out
    assert main(["pod", "down", plan, "--sky-python", sys.executable]) == 3
    assert "NOT taken down" in capsys.readouterr().out and not recorded(sky, "down")
    # the network is back: the same command on the plan folder re-attaches, fetches, takes it down; no new launch
    monkeypatch.delenv("FAKE_RSYNC_FAIL")
    assert main(["pod", "launch", str(tmp_path / "plan"), "--data-dir", str(tmp_path / "merged"),
                 "--sky-python", sys.executable]) == 0
    out = capsys.readouterr().out
    assert "0 pod(s) to launch, 1 to re-attach to" in out and "re-attached, not launched again" in out
    assert len(recorded(sky, "launch")) == 1 and len(recorded(sky, "down")) == 1
    assert ok_runs(tmp_path / "merged") == {"a": 1, "b": 1}
    _priced_as_billed(sky, tmp_path / "merged")


# --- 4: a stopped laptop -------------------------------------------------------------------------------------------

def test_a_stopped_launcher_resumes_by_reattaching(tmp_path, sky, capsys):
    """Before: the resume relaunched over the live cluster (SkyPilot reruns setup and queues a second job), the
    launch was marked failed and `down` destroyed the finished runs. After: the live cluster is re-attached to."""
    repo = pod_checkout(tmp_path, experiments="ab")
    plan, data = tmp_path / "plan", tmp_path / "merged"
    env = {**os.environ}
    proc = subprocess.Popen([str(ROOT / ".venvs/lab/bin/offload-lab"), "pod", "launch",
                             str(repo / "configs/campaigns/camp.yaml"), "--plan-id", "t1", "--out", str(plan),
                             "--data-dir", str(data), "--sky-python", sys.executable], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (plan / "launches.jsonl").is_file() or '"launched"' not in (plan / "launches.jsonl").read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the laptop goes to sleep: the launcher is gone, the pod is not
        proc.wait()
    rc = sky / "clusters" / "ol-camp-t1-0" / "jobs" / "1" / "rc"
    deadline = time.monotonic() + 240
    while not rc.is_file():  # the pod finishes its part with nobody watching
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert main(["pod", "launch", str(plan), "--data-dir", str(data), "--sky-python", sys.executable]) == 0
    out = capsys.readouterr().out
    assert "1 to re-attach to" in out
    assert len(recorded(sky, "launch")) == 1 and not recorded(sky, "reused")  # never launched over the live one
    assert len(recorded(sky, "setup")) == 1 and len(recorded(sky, "down")) == 1
    assert ok_runs(data) == {"a": 1, "b": 1}
    _priced_as_billed(sky, data)


# --- 5: a transient fetch failure, then a preemption; a preemption during a fetch ---------------------------------

def test_a_flaky_fetch_is_retried_before_the_pod_is_lost(tmp_path, sky, capsys, monkeypatch):
    """Before: the failed fetch of b was not retried; the pod was preempted at c; the relaunch ran b again (two
    priced launches, b twice). After: b comes home on the retry, the relaunch runs c only, and the preempted
    session is closed at the preemption with its minutes."""
    repo = pod_checkout(tmp_path, experiments="abc")
    monkeypatch.setenv("FAKE_RSYNC_FLAKY", "ol-camp-t1-0@2")  # the fetch after b fails once
    monkeypatch.setenv("FAKE_SKY_PREEMPT", "ol-camp-t1-0@c")
    assert _launch(repo, tmp_path) == 0, capsys.readouterr()
    relaunch = yaml.safe_load((tmp_path / "plan" / "ol-camp-t1-0.r1.yaml").read_text())
    assert "--only c" in relaunch["run"]
    data = tmp_path / "merged"
    assert ok_runs(data) == {"a": 1, "b": 1, "c": 1}
    pods = _priced_as_billed(sky, data)
    assert len(pods) == 2
    sessions = ledger.read_ledger(data, "camp")
    assert not [s for s in sessions if s.get("open")]
    [lost] = [s for s in sessions if s.get("outcome") == "lost"]
    [gone] = [b for b in billed(sky) if b["why"] == "preempted"]
    assert lost["ended_at"][:19] == [p for p in pods if p["launch"] == gone["cluster_hash"]][0]["ended_at"][:19]
    assert lost["minutes"] > 0
    # each session under the launch it ran in, not under every launch of the name
    assert sorted(len(p["sessions"]) for p in pods) == [1, 1]


def test_a_preemption_during_a_fetch_relaunches_what_did_not_come_home(tmp_path, sky, capsys, monkeypatch):
    repo = pod_checkout(tmp_path, experiments="abc")
    monkeypatch.setenv("FAKE_SKY_PREEMPT", "ol-camp-t1-0@fetch:2")  # lost while b's run is being copied
    assert _launch(repo, tmp_path) == 0, capsys.readouterr()
    relaunch = yaml.safe_load((tmp_path / "plan" / "ol-camp-t1-0.r1.yaml").read_text())
    assert "--only b,c" in relaunch["run"]  # b never came home: run again; a did: not
    assert ok_runs(tmp_path / "merged") == {"a": 1, "b": 1, "c": 1}
    assert len(_priced_as_billed(sky, tmp_path / "merged")) == 2


# --- 10: a budget cap ------------------------------------------------------------------------------------------------

def test_max_cost_stops_launching_and_takes_down_what_it_started(tmp_path, sky, capsys, monkeypatch):
    """Reached at once: the running pod has its data fetched and is taken down (or, its data not fetchable yet,
    left up and named); the relaunch its loss would call for is not made."""
    repo = pod_checkout(tmp_path, experiments="ab")
    assert _launch(repo, tmp_path, "--max-cost", "0.000001") == 4
    out = capsys.readouterr().out
    assert "--max-cost 1e-06 reached" in out
    assert len(recorded(sky, "launch")) == 1  # nothing launched after the cap
    events = [json.loads(x)["event"] for x in (tmp_path / "plan" / "launches.jsonl").read_text().splitlines()]
    assert "budget_stop" in events and ("down" in events or "left_up" in events)
    if "down" in events:
        assert [b["why"] for b in billed(sky)] == ["down"]


# --- 8: spot through managed jobs, recovered with the experiments that are done skipped ----------------------------

def test_spot_runs_as_a_managed_job_recovered_without_rerunning_what_is_done(tmp_path, sky, capsys, monkeypatch):
    """Before: spot pods were planned as `sky launch --down` (no recovery), and a recovery reran the whole --only
    list. After: `sky jobs launch`; the recovered task starts from the bucket and runs only what is not done there;
    both of the job's clusters (`<name>-<job_id>`) are priced."""
    from offload_lab.pods import skypilot as sp

    monkeypatch.setattr(sp, "SYNC_EVERY_S", 1)  # the pod's copies to the bucket, every second here
    repo = pod_checkout(tmp_path, experiments="abc", pods={"fake": {**POD, "use_spot": True}})
    monkeypatch.setenv("FAKE_SKY_PREEMPT", "ol-camp-t1-0-1@b")  # the job's first pod lost when b starts
    assert _launch(repo, tmp_path, "--bucket", "bk") == 0, capsys.readouterr()
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert record["commands"]["launch"][0].startswith("sky jobs launch -y -d -n ol-camp-t1-0 ")
    assert record["commands"]["watch"][0] == "sky jobs logs -n ol-camp-t1-0"
    assert len(recorded(sky, "jobs_launch")) == 1 and len(recorded(sky, "jobs_recover")) == 1
    assert not recorded(sky, "launch")  # never an unmanaged launch of a spot pod
    assert "a: ok" in out
    data = tmp_path / "merged"
    assert ok_runs(data) == {"a": 1, "b": 1, "c": 1}  # a not run again by the recovery
    pods = _priced_as_billed(sky, data)
    assert [p["sky_cluster"] for p in pods] == ["ol-camp-t1-0-1", "ol-camp-t1-0-1"]


# --- the recorder's own races, as SkyPilot 0.14.1 has them ---------------------------------------------------------

def _task(tmp: Path) -> Path:
    work = tmp / "work"
    work.mkdir()
    (work / "hello.txt").write_text("hi")
    task = tmp / "t.yaml"
    task.write_text(yaml.safe_dump({"name": "c", "workdir": str(work), "setup": "echo setup\n",
                                    "run": "echo ran; sleep 0.2\n"}))
    return task


def test_launch_on_a_live_cluster_reuses_it_and_status_is_stale_until_refreshed(tmp_path, sky):
    """`sky launch -c NAME` on an UP cluster: no new machine, setup again, job 2 (sky/execution.py); a preempted
    cluster stays UP in `sky status` until it is refreshed (StatusRefreshMode.NONE is the default); the adapter
    always refreshes."""
    adapter = launchmod.Adapter(Path(sys.executable))
    task = _task(tmp_path)
    first = adapter.call("launch", {"task": str(task), "cluster": "ol-c-0", "managed": False, "down": True})
    second = adapter.call("launch", {"task": str(task), "cluster": "ol-c-0", "managed": False, "down": True})
    assert (first["job_id"], second["job_id"]) == (1, 2)
    assert len(recorded(sky, "setup")) == 2 and len(recorded(sky, "reused")) == 1 and len(billed(sky)) == 1
    subprocess.run([sys.executable, "-c", "import sky; sky.end_launch('ol-c-0', 'preempted')"], check=True)
    stale = subprocess.run([sys.executable, "-c", "import sky, json; print(json.dumps(sky.get(sky.status(['ol-c-0']))))"],
                           check=True, capture_output=True, text=True).stdout
    assert json.loads(stale) == [{"name": "ol-c-0", "status": "UP"}]  # SkyPilot's cache, not the cloud
    assert adapter.call("status", {"cluster": "ol-c-0", "job_id": 2})["cluster_status"] is None
    assert [r["refresh"] for r in recorded(sky, "status")] == ["NONE", "FORCE"]
