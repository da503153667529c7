"""Claims of a rehearsal (``offload-lab campaign rehearse``): the campaign ran against an emulated pod.

The rehearsal's own run (written by :mod:`offload_lab.campaigns.rehearse`, no notebook) holds ``rehearsal.json``:
the pod model the emulator followed, whether the campaign was shortened, how many steps would fail, and the cost it
predicts on the real pod. The paper's first page prints these when the campaign has such a run.
"""

from __future__ import annotations

import functools

from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_sig

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)

REHEARSAL = "rehearsal"
FILES = ["rehearsal.json"]


def _record(src: Sources) -> dict:
    return src.json("rehearsal.json")


@claim("rehearsal.pod_model", experiment=REHEARSAL, files=FILES, fmt="{}", unit="")
def _pod_model(src: Sources) -> str:
    """The pod model file the emulated pod followed."""
    return "configs/pods/" + _record(src)["pod_model"]["file"]


@claim("rehearsal.pod_model_name", experiment=REHEARSAL, files=FILES, fmt="{}", unit="")
def _pod_model_name(src: Sources) -> str:
    """The pod model's name."""
    return str(_record(src)["pod_model"]["name"])


@claim("rehearsal.campaign", experiment=REHEARSAL, files=FILES, fmt="{}", unit="")
def _campaign(src: Sources) -> str:
    """The pod campaign the rehearsal ran."""
    return str(_record(src)["campaign"])


@claim("rehearsal.shortened", experiment=REHEARSAL, files=FILES, fmt="{}", unit="")
def _shortened(src: Sources) -> str:
    """Whether the rehearsal ran the campaign as written or shortened by a file of overrides, in words."""
    r = _record(src)
    if not r["shortened"]:
        return "as the campaign file writes it"
    return f"shortened by the overrides in {r['overrides']['file'] and r['overrides']['file'].split('/')[-1]}"


@claim("rehearsal.would_fail", experiment=REHEARSAL, files=FILES, fmt=fmt_int, unit="steps")
def _would_fail(src: Sources) -> int:
    """Steps of the campaign that would fail on the real pod, as the rehearsal found them."""
    return sum(1 for f in _record(src)["would_fail"] if f.get("level") == "error")


@claim("rehearsal.minutes", experiment=REHEARSAL, files=FILES, fmt=fmt_sig(3), unit="min")
def _minutes(src: Sources) -> float:
    """Minutes the campaign's experiments would take on the real pod (boots left out)."""
    return float(_record(src)["cost"]["predicted_minutes"])


@claim("rehearsal.cost", experiment=REHEARSAL, files=FILES, fmt="{:.2f}", unit="")
def _cost(src: Sources) -> float:
    """What those minutes cost at the stack's price."""
    return float(_record(src)["cost"]["predicted_cost"])


@claim("rehearsal.currency", experiment=REHEARSAL, files=FILES, fmt="{}", unit="")
def _currency(src: Sources) -> str:
    """The currency of the stack's price."""
    return str(_record(src)["cost"]["currency"])


@claim("rehearsal.duration_minutes", experiment=REHEARSAL, files=FILES, fmt=fmt_sig(2), unit="min")
def _duration(src: Sources) -> float:
    """Minutes the rehearsal itself took on this machine."""
    return float(_record(src)["seconds"]) / 60.0
