"""The campaign ledger: every session's pod, start and end, minutes and cost, written with the data.

``<data_root>/<campaign>/ledger.jsonl`` is append-only. A session writes a ``start`` line when the campaign runner
begins (before the topology check, so a pod refused for its topology is still paid for and still listed) and an
``end`` line when it stops, however it stops. A session with a start and no end (the machine died, the runner was
killed) is reported as open: its minutes are not guessed.

Cost is minutes / 60 x the stack file's ``price.per_hour``, in the stack file's currency; a stack without a price
(the embedded one) costs nothing that is recorded (``cost: null``). The pod is named by ``$OFFLOAD_LAB_POD`` (the
provider's pod id, if you set it) and described by the environment capture: hostname hash, GPU names, CPU.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.core.redact import redact_record

LEDGER_NAME = runs.LEDGER_NAME
POD_ENV = "OFFLOAD_LAB_POD"
PROVIDER_ENV = "OFFLOAD_LAB_POD_PROVIDER"
PLAN_ENV = "OFFLOAD_LAB_POD_PLAN"
PART_ENV = "OFFLOAD_LAB_POD_PART"


def ledger_path(data_root: Path | str, campaign: str) -> Path:
    return Path(data_root) / runs.check_name("campaign", campaign) / LEDGER_NAME


def pod_record(env: dict[str, Any]) -> dict[str, Any]:
    """What the ledger says about the machine: names only, never credentials."""
    gpus = (env.get("gpu") or {}).get("gpus") or []
    topo = (env.get("gpu") or {}).get("topology") or {}
    return {
        "name": os.environ.get(POD_ENV) or None,
        "provider": os.environ.get(PROVIDER_ENV) or None,
        # set by `offload-lab pod plan`'s tasks: which plan, and which part of it this pod runs
        "plan": os.environ.get(PLAN_ENV) or None,
        "part": os.environ.get(PART_ENV) or None,
        "hostname_hash": env.get("hostname_hash"),
        "gpu_count": len(gpus),
        "gpus": [g.get("name") for g in gpus],
        "crosses_sockets": topo.get("crosses_sockets") if topo else None,
        "cpu": (env.get("cpu") or {}).get("model"),
        "memory_bytes": (env.get("memory") or {}).get("total_bytes"),
    }


@dataclass
class Session:
    id: str
    campaign: str
    path: Path
    started_at: str
    price: dict[str, Any] | None
    _t0_ns: int
    ended: bool = False

    def end(self, outcome: str, runs_made: list[str] | None = None, error: str | None = None,
            **facts: Any) -> dict[str, Any]:
        """Append the session's end line and return it (once; a second call returns the same figures again).
        ``facts`` go into the line too (the runner's: the experiments that failed and those it skipped)."""
        seconds = (time.monotonic_ns() - self._t0_ns) / 1e9
        minutes = seconds / 60.0
        cost = None
        if self.price is not None:
            cost = round(minutes / 60.0 * float(self.price["per_hour"]), 4)
        line = {
            "event": "end",
            "session": self.id,
            "campaign": self.campaign,
            "ended_at": runs.utc_now(),
            "minutes": round(minutes, 3),
            "cost": cost,
            "currency": self.price["currency"] if self.price else None,
            "outcome": outcome,
            "error": error,
            "runs": list(runs_made or []),
            **facts,
        }
        if not self.ended:
            _append(self.path, line)
            self.ended = True
        return line


def _append(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        # A line torn by a crash or a full disk is ended first: this one stays whole, readers skip the torn one.
        runs.start_on_fresh_line(f, path)
        f.write(json.dumps(redact_record(obj), default=str, separators=(",", ":")) + "\n")  # no URL credentials
        f.flush()
        os.fsync(f.fileno())


def start_session(data_root: Path | str, campaign: str, env: dict[str, Any], price: dict[str, Any] | None,
                  **facts: Any) -> Session:
    """Append a session's start line (pod, price, anything else the caller adds, e.g. the campaign file)."""
    sid = runs.new_run_id() + "-" + secrets.token_hex(2)
    path = ledger_path(data_root, campaign)
    started = runs.utc_now()
    _append(path, {"event": "start", "session": sid, "campaign": campaign, "started_at": started,
                   "pod": pod_record(env), "price": price, **facts})
    return Session(id=sid, campaign=campaign, path=path, started_at=started, price=price,
                   _t0_ns=time.monotonic_ns())


def read_ledger(data_root: Path | str, campaign: str) -> list[dict[str, Any]]:
    """Sessions in start order, each its start line merged with its end line (``open`` when there is none)."""
    path = ledger_path(data_root, campaign)
    if not path.is_file():
        raise InputError(f"campaign {campaign} has no ledger at {path}; `offload-lab campaign run` writes it")
    sessions: dict[str, dict[str, Any]] = {}
    for event in runs.read_events(path):
        sid = event.get("session")
        if event.get("event") == "start":
            sessions[sid] = {**event, "open": True}
        elif event.get("event") == "end" and sid in sessions:
            sessions[sid].update({k: v for k, v in event.items() if k != "event"}, open=False)
    for s in sessions.values():
        s.pop("event", None)
    return list(sessions.values())


def totals(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """Minutes and cost over the closed sessions, cost per currency; open sessions counted apart."""
    closed = [s for s in sessions if not s.get("open")]
    cost: dict[str, float] = {}
    for s in closed:
        if s.get("cost") is not None:
            cost[s["currency"]] = round(cost.get(s["currency"], 0.0) + s["cost"], 4)
    return {
        "sessions": len(sessions),
        "closed": len(closed),
        "open": len(sessions) - len(closed),
        "minutes": round(sum(s.get("minutes") or 0.0 for s in closed), 3),
        "cost": cost,
    }


# --- the launcher's own report ------------------------------------------------------------------------------------
#
# A pod launched by SkyPilot is billed from launch to teardown, setup (the model download) included; a session only
# from `campaign run` to its end. So the ledger holds both: sessions as above, at the stack file's price, and one
# ``pod`` line per launch of each cluster from what the launcher reports (`sky cost-report -o json`: name,
# launched_at, duration, usage_intervals, total_cost, num_nodes, resources, status, cluster_hash). ``source`` says
# where each pod line's price is from: ``launcher`` (SkyPilot's catalog price in USD, not the invoice), ``stack_file`` (the launcher gave none: SkyPilot
# reports total_cost 0.0 for a cluster it cannot price) or ``none``.

POD_EVENT = "pod"


def _iso(ts: float | int | None) -> str | None:
    import datetime as dt

    if ts is None:
        return None
    return dt.datetime.fromtimestamp(float(ts), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _priced(seconds: float, total: Any, stack_price: dict[str, Any] | None, nodes: int = 1) -> dict[str, Any]:
    """SkyPilot's cost of a launch (every node), else the stack file's price, which is one node's, times the nodes."""
    if total and seconds > 0:
        return {"cost": round(float(total), 4), "currency": "USD", "source": "launcher",
                "price": {"per_hour": round(float(total) / (seconds / 3600), 4), "currency": "USD"},
                "note": "sky cost-report: SkyPilot's catalog price, not the invoice"}
    if stack_price:
        return {"cost": round(seconds / 3600 * float(stack_price["per_hour"]) * nodes, 4),
                "currency": stack_price["currency"], "price": stack_price, "source": "stack_file",
                "note": f"the launcher gave no price; cost at the stack file's price x {nodes} node(s)"}
    return {"cost": None, "currency": None, "price": None, "source": "none",
            "note": "neither the launcher nor the stack file gives a price"}


def pod_records(cost_report: list[dict[str, Any]], clusters: list[str], stack_price: dict[str, Any] | None,
                launcher: str = "skypilot") -> list[dict[str, Any]]:
    """One ``pod`` line per launch of each cluster from the launcher's report (a cluster name launched again, after
    a failed setup or a preemption, is listed once per launch, each with its own ``cluster_hash``: each is paid, each
    gets its line, ``launch`` naming it); a launch still up (or with an open usage interval) is ``open`` and has no
    end yet; a cluster the report does not list gets a line that says so."""
    if not isinstance(cost_report, list) or not all(isinstance(r, dict) for r in cost_report):
        raise InputError("the launcher's report is not a list of clusters (`sky cost-report -o json --days 0` "
                         "writes one)")
    out = []
    for name in clusters:
        mine = sorted((r for r in cost_report if r.get("name") == name), key=lambda r: r.get("launched_at") or 0)
        base: dict[str, Any] = {"event": POD_EVENT, "cluster": name, "launcher": launcher,
                                "recorded_at": runs.utc_now()}
        if not mine:
            out.append({**base, "launch": None, "open": None, "minutes": None, "cost": None, "currency": None,
                        "price": stack_price, "source": "none",
                        "note": "the launcher's report does not list this cluster; no minutes recorded"})
        out += [_pod_line(base, r, stack_price) for r in mine]
    return out


def _pod_line(base: dict[str, Any], r: dict[str, Any], stack_price: dict[str, Any] | None) -> dict[str, Any]:
    """One launch's ``pod`` line."""
    line = {**base, "launch": str(r.get("cluster_hash") or r.get("launched_at"))}
    intervals = [iv for iv in (r.get("usage_intervals") or []) if iv]
    ends = [iv[1] for iv in intervals]
    is_open = any(e is None for e in ends) or r.get("status") not in (None, "TERMINATED")
    seconds = float(r.get("duration") or 0)
    line.update(started_at=_iso(min((iv[0] for iv in intervals), default=r.get("launched_at"))),
                ended_at=None if is_open or not ends else _iso(max(ends)), open=is_open,
                minutes=round(seconds / 60, 3), nodes=r.get("num_nodes"), resources=r.get("resources"),
                status=r.get("status"), **_priced(seconds, r.get("total_cost"), stack_price,
                                                  int(r.get("num_nodes") or 1)))
    return line


def pod_key(line: dict[str, Any]) -> tuple[str, str]:
    """A ``pod`` line's launch: its cluster and, when the launcher tells launches apart, the launch."""
    return (str(line.get("cluster")), str(line.get("launch")))


def read_pods(data_root: Path | str, campaign: str) -> list[dict[str, Any]]:
    """The campaign's ``pod`` lines, one per launch (the latest per launch: a launch recorded open and again closed
    counts once), each with the sessions its cluster name ran (joined on the session's ``pod.name``)."""
    path = ledger_path(data_root, campaign)
    if not path.is_file():
        return []
    pods: dict[tuple[str, str], dict[str, Any]] = {}
    for event in runs.read_events(path):
        if event.get("event") == POD_EVENT:
            pods[pod_key(event)] = {k: v for k, v in event.items() if k != "event"}
    listed = {c for c, launch in pods if launch != "None"}
    pods = {k: v for k, v in pods.items() if k[1] != "None" or k[0] not in listed}  # listed later: superseded
    sessions = read_ledger(data_root, campaign) if pods else []
    for (name, _), pod in pods.items():
        # a cluster name launched again is another launch: each session under the launch it started in
        pod["sessions"] = [s["session"] for s in sessions if (s.get("pod") or {}).get("name") == name
                           and _within(s.get("started_at"), pod.get("started_at"), pod.get("ended_at"))]
    return list(pods.values())


def _within(at: str | None, start: str | None, end: str | None) -> bool:
    """Whether ``at`` falls in the launch from ``start`` to ``end`` (still open: no end), to the second (SkyPilot
    reports whole seconds)."""
    import re

    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
    if not at or not start or not stamp.match(at) or not stamp.match(start):
        return True  # a line without times cannot be told apart: kept, as before launches were told apart
    second = at[:19]
    return start[:19] <= second and (end is None or second <= end[:19])


def pod_totals(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """Paid minutes and cost of the closed pods, by price source and currency; open pods counted apart."""
    closed = [p for p in pods if p.get("open") is False]
    cost: dict[str, dict[str, float]] = {}
    for p in closed:
        if p.get("cost") is not None:
            by = cost.setdefault(p["source"], {})
            by[p["currency"]] = round(by.get(p["currency"], 0.0) + p["cost"], 4)
    return {"pods": len(pods), "closed": len(closed), "open": sum(1 for p in pods if p.get("open")),
            "unlisted": sum(1 for p in pods if p.get("open") is None),
            "minutes": round(sum(p.get("minutes") or 0.0 for p in closed), 3), "cost_by_source": cost}
