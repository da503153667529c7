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
    pm = _record(src)["pod_model"]
    path = str(pm.get("path") or "")
    # the recorded path when it is the repository's (relative), else where such files live
    if path and not path.startswith("/"):
        return path
    # a file outside the repository (a predicted pod model written anywhere): its name; the record has the path
    return pm["file"] if pm.get("prediction") else "configs/pods/" + pm["file"]


@claim("rehearsal.pod_model_name", experiment=REHEARSAL, files=FILES, fmt="{}", unit="")
def _pod_model_name(src: Sources) -> str:
    """The pod model's name."""
    return str(_record(src)["pod_model"]["name"])


@claim("rehearsal.pod_model_basis", experiment=REHEARSAL, files=FILES, fmt="{}", unit="")
def _pod_model_basis(src: Sources) -> str:
    """What the pod model rests on, in words: the published study's tables, or a prediction from hardware figures."""
    r = _record(src)
    if r.get("predicted") or (r["pod_model"].get("prediction") is not None):
        return ("predicted from hardware figures by offload-lab pod predict, with no measurement behind it. Every "
                "number below is a prediction: the emulation of a pod derived from datasheets and physics, not a "
                "measurement of any pod")
    return ("built from the published study's tables. Every number below is a measurement of that emulation, so it "
            "can only echo the published figures the model was built from")


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


@claim("rehearsal.time_scale", experiment=REHEARSAL, files=FILES, fmt="{}", unit="")
def _time_scale(src: Sources) -> str:
    """The emulated pod's time, in words: real, or accelerated by a factor above floors set from the client's
    measured clock error, and what was converted back to pod time."""
    r = _record(src)
    ts = r.get("time_scaling") or {}
    if not ts.get("accelerated"):
        return "real (not accelerated)"
    decode = ("decode kept real" if ts.get("tpot_floor_ms") is None
              else f"TPOTs above {fmt_sig(3)(ts['tpot_floor_ms'])} ms")
    # (the clock check's run id is in rehearsal.json: run ids are listed in the supplement, not the body)
    where = (ts.get("floor_source") or {}).get("clock_check")
    return (f"accelerated {fmt_sig(3)(ts['factor'])}x for TTFTs above {fmt_sig(3)(ts['ttft_floor_s'])} s and "
            f"{decode}, floors set from the load generator's "
            + ("measured clock error (its newest clock check)" if where else "fallback floor (no clock check)")
            + ". The predicted minutes and cost, the comparison with the published figures and the seats' inputs "
              "are converted back to pod time; the experiment sections' own tables show the accelerated pod's times")
