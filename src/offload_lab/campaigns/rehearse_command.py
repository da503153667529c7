"""``offload-lab campaign rehearse FILE``: its parameters (the flags come from :class:`RehearseParams`), the one call
(:func:`run`) and the few lines it prints (:func:`summary`); docs/rehearsal.md."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import Field

from offload_lab.core.commands import Params
from offload_lab.core.paths import REHEARSALS_DIR
from offload_lab.core.timescale import DEFAULT_TIME_SCALE


class RehearseParams(Params):
    file: str = Field(description="pod campaign file, e.g. configs/campaigns/study-pod.yaml")
    overrides: str | None = Field(None, description="file of overrides that shortens the campaign "
                                                    "(configs/rehearsals/*.yaml)")
    pod_model: str | None = Field(None, description="pod model file (default: the overrides file's, else "
                                                    "configs/pods/study-published.yaml)")
    data_dir: str = Field(REHEARSALS_DIR, description="data root of the rehearsal")
    out: str | None = Field(None, description="where the paper goes (default: _output/<rehearsal campaign>/)")
    no_paper: bool = Field(False, description="do not build the paper")
    time_scale: float = Field(DEFAULT_TIME_SCALE, ge=1.0, description="serve waits above their floors this many "
                                                                      "times faster (1: real time; docs/rehearsal.md)")


def run(p: RehearseParams, log: Callable[[str], None] = print) -> Any:
    from offload_lab.campaigns import rehearse

    return rehearse.rehearse(p.file, data_root=p.data_dir, overrides_file=p.overrides, pod_model=p.pod_model,
                             paper=not p.no_paper, paper_out=p.out, log=log, time_scale_factor=p.time_scale)


def exit_code(res: Any) -> int:
    """4, as for a campaign with a failed notebook: a step that would fail on the pod."""
    return 4 if any(f.get("level") == "error" for f in res.failures) else 0


def record(res: Any) -> dict[str, Any]:
    """What --json prints."""
    return {"campaign": res.campaign, "run": str(res.run), "record": res.record,
            "paper": {k: str(v) for k, v in res.paper.outputs().items()} if res.paper else None,
            "would_fail": res.failures}


def summary(res: Any) -> str:
    """The rehearsal in a few lines: outcomes, minutes and cost on the real pod, and every step that would fail."""
    rec = res.record
    cost = rec["cost"]
    lines = [f"rehearsal of {rec['campaign']} against the emulated pod {rec['pod_model']['file']} "
             f"({'shortened' if rec['shortened'] else 'as written'}, time scale {rec['time_scale']:g}): "
             f"{rec['seconds'] / 60:.1f} min here; runs in {res.data_root / res.campaign}",
             f"{'experiment':16} {'outcome':8} {'here min':>8} {'+ model':>8} {'pod min':>8} {'cost':>8}"]
    for r in rec["experiments"]:
        here = f"{r['seconds'] / 60:.1f}" if r["seconds"] is not None else "-"
        pod = f"{r['predicted_minutes']:.1f}" if r["predicted_minutes"] is not None else "-"
        eur = f"{r['predicted_cost']:.2f}" if r["predicted_cost"] is not None else "-"
        lines.append(f"{r['experiment']:16} {r['outcome']:8} {here:>8} {r['added_seconds'] / 60:>8.1f} {pod:>8} "
                     f"{eur:>8}")
    if cost["predicted_cost"] is not None:
        lines.append(f"on the real pod: {cost['predicted_minutes']:.0f} min, {cost['predicted_cost']:.2f} "
                     f"{cost['currency']} at {cost['per_hour']:g} {cost['currency']}/h ({cost['left_out']} left out)")
    for b in rec["boots"]:
        lines.append(f"boot {b['boot']}: {b['outcome']}" + ("" if b.get("as_expected") in (None, True)
                                                           else f" (expected {b['expected']})"))
    errors = [f for f in res.failures if f.get("level") == "error"]
    lines.append(f"{len(errors)} step(s) would fail" + (":" if errors else ""))
    for f in errors:
        lines.append(f"  - {f.get('step')}: {f.get('item', '') + ': ' if f.get('item') else ''}{f.get('message')}")
    others = [f for f in res.failures if f.get("level") != "error"]
    if others:
        lines.append(f"{len(others)} warning(s) or unpinned item(s) (rehearsal.json, would_fail.csv)")
    if res.paper is not None:
        lines.append("paper: " + ", ".join(str(p) for p in res.paper.outputs().values()))
    return "\n".join(lines)
