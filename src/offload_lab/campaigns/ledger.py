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

LEDGER_NAME = "ledger.jsonl"
POD_ENV = "OFFLOAD_LAB_POD"
PROVIDER_ENV = "OFFLOAD_LAB_POD_PROVIDER"


def ledger_path(data_root: Path | str, campaign: str) -> Path:
    return Path(data_root) / runs.check_name("campaign", campaign) / LEDGER_NAME


def pod_record(env: dict[str, Any]) -> dict[str, Any]:
    """What the ledger says about the machine: names only, never credentials."""
    gpus = (env.get("gpu") or {}).get("gpus") or []
    topo = (env.get("gpu") or {}).get("topology") or {}
    return {
        "name": os.environ.get(POD_ENV) or None,
        "provider": os.environ.get(PROVIDER_ENV) or None,
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

    def end(self, outcome: str, runs_made: list[str] | None = None, error: str | None = None) -> dict[str, Any]:
        """Append the session's end line and return it (once; a second call returns the same figures again)."""
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
        }
        if not self.ended:
            _append(self.path, line)
            self.ended = True
        return line


def _append(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj, default=str, separators=(",", ":")) + "\n")
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
