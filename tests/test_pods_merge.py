"""Two pods' runs merged into one campaign (`offload-lab pod merge`), the collisions it refuses, and the ledger's
launcher records: start, end, cluster and price from `sky cost-report`, the stack file's price where it has none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload_lab.campaigns import ledger
from offload_lab.cli.main import main
from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.pods import merge as mergemod

STACK_PRICE = {"per_hour": 3.73, "currency": "EUR", "what": "one pod", "source": "published"}
COST_REPORT = [
    {"name": "ol-study-pod-t001-0", "launched_at": 1764579600, "duration": 5400, "num_nodes": 1,
     "usage_intervals": [[1764579600, 1764585000]], "total_cost": 6.12, "status": "TERMINATED",
     "resources": {"accelerators": {"RTXPRO6000": 2}, "infra": "runpod"}},
    {"name": "ol-study-pod-t001-1", "launched_at": 1764579700, "duration": 3600, "num_nodes": 1,
     "usage_intervals": [[1764579700, 1764583300]], "total_cost": 0.0, "status": "TERMINATED", "resources": None},
]


def _pod_data(root: Path, campaign: str, exp: str, n: int, cluster: str) -> list[str]:
    """What one pod's `campaign run` leaves: finished runs and a session in the ledger, named by the pod."""
    ids = []
    for _ in range(n):
        r = runs.new_run(root, campaign, exp, {"x": 1})
        r.write_json("result.json", {"v": 1})
        r.finish("ok")
        ids.append(r.run_id)
    path = ledger.ledger_path(root, campaign)
    sid = f"s-{cluster}"
    with open(path, "a") as f:
        f.write(json.dumps({"event": "start", "session": sid, "campaign": campaign, "started_at": "x",
                            "pod": {"name": cluster, "provider": "skypilot"}, "price": STACK_PRICE}) + "\n")
        f.write(json.dumps({"event": "end", "session": sid, "campaign": campaign, "minutes": 60.0, "cost": 3.73,
                            "currency": "EUR", "outcome": "ok"}) + "\n")
    return ids


def _plan_dir(tmp: Path, clusters: list[str]) -> Path:
    d = tmp / "plan"
    d.mkdir()
    plan = {"plan_id": "t001", "campaign": "study-pod", "campaign_file": "c.yaml", "stack_file": "s.yaml",
            "split": "experiments", "parts": [{"index": i, "of": len(clusters), "cluster": c, "only": None,
                                               "repeat_boots": None} for i, c in enumerate(clusters)]}
    (d / "plan.json").write_text(json.dumps({"plan": plan, "stack_price": STACK_PRICE, "commands": {}}))
    return d


def test_merge_two_pods_into_one_campaign_with_launcher_records(tmp_path, capsys):
    clusters = ["ol-study-pod-t001-0", "ol-study-pod-t001-1"]
    plan = _plan_dir(tmp_path, clusters)
    ids = (_pod_data(plan / clusters[0] / "data", "study-pod", "context", 2, clusters[0])
           + _pod_data(plan / clusters[1] / "data", "study-pod", "concurrency", 2, clusters[1]))
    (plan / "cost-report.json").write_text(json.dumps(COST_REPORT))
    dest = tmp_path / "data"
    args = ["pod", "merge", str(plan), "--data-dir", str(dest), "--cost-report", str(plan / "cost-report.json")]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["copied"]) == 4 and out["ledger_lines"] == 4 + 2
    assert sorted(p.name for p in runs.iter_runs(dest, "study-pod")) == sorted(ids)
    assert all(runs.verify_run(p) == [] for p in runs.iter_runs(dest, "study-pod"))  # manifests intact
    assert len(ledger.read_ledger(dest, "study-pod")) == 2
    a, b = ledger.read_pods(dest, "study-pod")
    assert a["source"] == "launcher" and a["cost"] == 6.12 and a["price"] == {"per_hour": 4.08, "currency": "USD"}
    assert a["started_at"] == "2025-12-01T09:00:00Z" and a["ended_at"] == "2025-12-01T10:30:00Z" and a["minutes"] == 90
    assert a["sessions"] == ["s-ol-study-pod-t001-0"]
    # SkyPilot could not price the second (total_cost 0.0): the stack file's price, and the line says so
    assert b["source"] == "stack_file" and b["cost"] == 3.73 and b["currency"] == "EUR" and b["open"] is False
    tot = ledger.pod_totals([a, b])
    assert tot["minutes"] == 150 and tot["cost_by_source"] == {"launcher": {"USD": 6.12}, "stack_file": {"EUR": 3.73}}
    # run again: nothing new copied, nothing appended
    assert main([*args, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["copied"] == [] and len(again["skipped"]) == 4 and again["ledger_lines"] == 0
    assert main(["pod", "ledger", "study-pod", "--data-dir", str(dest)]) == 0
    text = capsys.readouterr().out
    assert "price from launcher" in text and "price from stack_file" in text and "150.0 paid minutes" in text


def test_pod_records_open_and_unlisted_clusters():
    report = [{**COST_REPORT[0], "status": "UP", "usage_intervals": [[1764579600, None]]}]
    up, gone = ledger.pod_records(report, ["ol-study-pod-t001-0", "ol-study-pod-t001-9"], None)
    assert up["open"] is True and up["ended_at"] is None and up["source"] == "launcher"
    assert gone["source"] == "none" and gone["open"] is None and gone["minutes"] is None
    assert ledger.pod_totals([up, gone]) == {"pods": 2, "closed": 0, "open": 1, "unlisted": 1, "minutes": 0,
                                             "cost_by_source": {}}
    with pytest.raises(InputError, match="not a list of clusters"):
        ledger.pod_records({"clusters": []}, ["x"], None)  # type: ignore[arg-type]


def test_merge_refuses_collisions_and_tampering(tmp_path):
    a, b, dest = tmp_path / "pod0", tmp_path / "pod1", tmp_path / "data"
    [rid] = _pod_data(a, "c", "e", 1, "p0")
    r = runs.new_run(b, "c", "e", {"x": 2}, run_id=rid)  # the same run id with another manifest, on a second pod
    r.finish("ok")
    with pytest.raises(InputError, match=f"run id {rid} comes from two sources"):
        mergemod.merge([a, b], dest, "c")
    assert not (dest / "c").exists()  # refused before anything was copied
    mergemod.merge([a], dest, "c")
    with pytest.raises(InputError, match="another manifest: a collision"):
        mergemod.merge([b], dest, "c")
    c = tmp_path / "pod2"
    [rid2] = _pod_data(c, "c", "e", 1, "p2")
    (c / "c" / "e" / rid2 / "result.json").write_text("tampered")
    with pytest.raises(InputError, match="does not verify"):
        mergemod.merge([c], dest, "c")
    # the same run, byte-identical, from two pods (both got it with the checkout's data/): merged once
    import shutil

    e, f = tmp_path / "pod4", tmp_path / "pod5"
    [rid3] = _pod_data(e, "c", "e3", 1, "p4")
    shutil.copytree(e, f)
    rep = mergemod.merge([e, f], tmp_path / "data2", "c")
    assert rep.copied == [f"c/e3/{rid3}"]
    d = tmp_path / "pod3"  # the same session id with another start line
    _pod_data(d, "c", "e2", 1, "p0")
    lines = (d / "c" / "ledger.jsonl").read_text().replace('"started_at": "x"', '"started_at": "y"')
    (d / "c" / "ledger.jsonl").write_text(lines)
    with pytest.raises(InputError, match="two different start lines for s-p0"):
        mergemod.merge([d], dest, "c")


def test_unfinished_run_is_copied_and_reported(tmp_path):
    src, dest = tmp_path / "pod0", tmp_path / "data"
    r = runs.new_run(src, "c", "e", {})
    r.write_json("partial.json", {})  # the pod went down mid-run: never finished
    rep = mergemod.merge([src], dest, "c")
    assert rep.unfinished == [f"c/e/{r.run_id}"] and rep.copied == rep.unfinished


def test_merge_needs_fetched_data_exit_2(tmp_path, capsys):
    plan = _plan_dir(tmp_path, ["ol-a-t001-0", "ol-a-t001-1"])
    _pod_data(plan / "ol-a-t001-0" / "data", "study-pod", "e", 1, "ol-a-t001-0")
    assert main(["pod", "merge", str(plan), "--data-dir", str(tmp_path / "data")]) == 2
    assert "no data fetched yet for ol-a-t001-1" in capsys.readouterr().err
    assert main(["pod", "merge", str(plan), "--data-dir", str(tmp_path / "data"), "--partial"]) == 0
    assert main(["pod", "merge", str(tmp_path), "--data-dir", str(tmp_path / "data")]) == 2
    assert "has no plan.json" in capsys.readouterr().err


def test_sessions_name_their_pod_plan_and_part(monkeypatch):
    for k, v in {"OFFLOAD_LAB_POD": "ol-study-pod-t001-1", "OFFLOAD_LAB_POD_PROVIDER": "skypilot",
                 "OFFLOAD_LAB_POD_PLAN": "t001", "OFFLOAD_LAB_POD_PART": "2/3"}.items():
        monkeypatch.setenv(k, v)
    rec = ledger.pod_record({})
    assert (rec["name"], rec["provider"], rec["plan"], rec["part"]) == ("ol-study-pod-t001-1", "skypilot", "t001", "2/3")


def test_a_relaunched_cluster_name_is_priced_once_per_launch():
    """`sky cost-report` lists a name launched twice (failed setup, `sky down`, launch again) twice: both are paid."""
    first = {**COST_REPORT[0], "cluster_hash": "aaaa", "duration": 2, "total_cost": 0.002,
             "usage_intervals": [[1764579600, 1764579602]]}
    second = {**COST_REPORT[0], "cluster_hash": "bbbb", "launched_at": 1764579700, "duration": 5, "total_cost": 0.005,
              "usage_intervals": [[1764579700, 1764579705]]}
    lines = ledger.pod_records([second, first], ["ol-study-pod-t001-0"], STACK_PRICE)
    assert [(x["launch"], x["minutes"]) for x in lines] == [("aaaa", round(2 / 60, 3)), ("bbbb", round(5 / 60, 3))]
    assert sum(x["cost"] for x in lines) == pytest.approx(0.007)
