"""The ledger one can bill from (pods/bill.py, campaigns/ledger.py's pod lines), from records shaped as SkyPilot
0.14.1's `sky cost-report -o json` writes them: nodes x price, a managed job's cluster `<name>-<job_id>` matched by
job id, each session under the launch it ran in. Cheap: no pod, no campaign."""

from __future__ import annotations

import json

import pytest

from offload_lab.campaigns import ledger
from offload_lab.pods import bill
from offload_lab.pods.plan import PodPart, PodPlan

PRICE = {"per_hour": 15.78, "currency": "USD", "what": "one node, 2 x B300", "source": "published"}


def _plan() -> PodPlan:
    return PodPlan(plan_id="t1", campaign="camp", campaign_file="c.yaml", stack_file="s.yaml", split="none",
                   parts=[PodPart(index=0, of=1, cluster="ol-camp-t1-0")])


def _record(name: str, at: int, seconds: float, nodes: int = 1, cost: float = 0.0, up: bool = False) -> dict:
    return {"name": name, "launched_at": at, "duration": seconds, "num_nodes": nodes, "resources": None,
            "cluster_hash": f"h{at}", "usage_intervals": [[at, None if up else at + int(seconds)]],
            "total_cost": cost, "status": "UP" if up else None}


def _launches(plan_dir, *events) -> None:
    plan_dir.mkdir(exist_ok=True)
    (plan_dir / "launches.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_the_stack_price_is_one_nodes_times_the_nodes(tmp_path):
    """Before: one hour of 2 x (2 x B300) with no SkyPilot price was recorded at 15.78 USD. After: 31.56."""
    _launches(tmp_path, {"event": "launch", "cluster": "ol-camp-t1-0", "launch": 0, "at": "2026-01-01T00:00:00Z"})
    [line] = bill.pod_lines([_record("ol-camp-t1-0", 1767225600, 3600, nodes=2)], tmp_path, _plan(), PRICE,
                            {"nodes": 2})
    assert line["source"] == "stack_file" and line["cost"] == pytest.approx(2 * 15.78) and line["nodes"] == 2
    assert line["launch_number"] == 0


def test_a_managed_jobs_cluster_is_matched_by_its_job_id(tmp_path):
    """Before: `<name>-<job_id>` matched no record ("no minutes recorded"). After: the job's own cluster(s), and no
    other job's."""
    _launches(tmp_path, {"event": "launch", "cluster": "ol-camp-t1-0", "launch": 0, "at": "2026-01-01T00:00:00Z"},
              {"event": "launched", "cluster": "ol-camp-t1-0", "launch": 0, "job_id": 7,
               "at": "2026-01-01T00:00:01Z"})
    report = [_record("ol-camp-t1-0-7", 1767225601, 600, cost=1.5),   # the job's first pod, preempted
              _record("ol-camp-t1-0-7", 1767226300, 1200, cost=3.0),  # its recovery
              _record("ol-camp-t1-0-8", 1767226300, 1200, cost=9.9)]  # someone else's job
    lines = bill.pod_lines(report, tmp_path, _plan(), PRICE, {"nodes": 1})
    assert [(x["sky_cluster"], x["cost"], x["source"]) for x in lines] == [
        ("ol-camp-t1-0-7", 1.5, "launcher"), ("ol-camp-t1-0-7", 3.0, "launcher")]
    assert sum(x["minutes"] for x in lines) == pytest.approx(30.0)


def test_sessions_are_attributed_to_the_launch_they_ran_in_and_a_lost_one_is_closed(tmp_path):
    """Before: every session of a cluster name was listed under every launch of it, and the session of a preempted
    pod stayed OPEN. After: one launch each; the lost session ends at its pod's end with its minutes."""
    data = tmp_path / "data"
    path = ledger.ledger_path(data, "camp")
    path.parent.mkdir(parents=True)
    pod = {"name": "ol-camp-t1-0", "plan": "t1", "part": "1/1"}
    price = {"per_hour": 2.0, "currency": "EUR"}
    lines = [{"event": "start", "session": "s1", "campaign": "camp", "started_at": "2026-01-01T00:01:00.000000Z",
              "pod": pod, "price": price},
             {"event": "start", "session": "s2", "campaign": "camp", "started_at": "2026-01-01T01:01:00.000000Z",
              "pod": pod, "price": price},
             {"event": "end", "session": "s2", "campaign": "camp", "ended_at": "2026-01-01T01:30:00.000000Z",
              "minutes": 29.0, "cost": 0.9667, "currency": "EUR", "outcome": "ok", "runs": []}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    _launches(tmp_path / "plan", {"event": "launch", "cluster": "ol-camp-t1-0", "launch": 0,
                                  "at": "2026-01-01T00:00:00Z"},
              {"event": "launch", "cluster": "ol-camp-t1-0", "launch": 1, "at": "2026-01-01T01:00:00Z"})
    report = [_record("ol-camp-t1-0", 1767225600, 1800, cost=1.0),   # 00:00 - 00:30, preempted
              _record("ol-camp-t1-0", 1767229200, 1860, cost=1.0)]   # 01:00 - 01:31
    pods = bill.pod_lines(report, tmp_path / "plan", _plan(), None, {"nodes": 1})
    assert [p["launch_number"] for p in pods] == [0, 1]
    for p in pods:
        ledger._append(path, p)
    [closed] = bill.close_lost_sessions(data, "camp", pods)
    assert closed["session"] == "s1" and closed["ended_at"] == "2026-01-01T00:30:00Z"
    assert closed["minutes"] == pytest.approx(29.0) and closed["cost"] == pytest.approx(29 / 60 * 2.0, abs=1e-4)
    assert closed["outcome"] == "lost"
    sessions = {p["launch"]: p["sessions"] for p in ledger.read_pods(data, "camp")}
    assert sessions == {"h1767225600": ["s1"], "h1767229200": ["s2"]}
    assert not [s for s in ledger.read_ledger(data, "camp") if s["open"]]
    assert bill.close_lost_sessions(data, "camp", pods) == []  # once
