"""Which run of each experiment the paper reads.

The newest ``ok`` run of the experiment whose parameters are those the campaign file declares for it, both sides
validated by the experiment's Params model (so a default written out and a default left out are the same). A run
made by hand into the campaign with other parameters is skipped, never printed: it is listed in ``claims.json`` and
in the build's log with the reason. Experiments the campaign file does not list (``boots``, written by the server)
and campaigns that have no file in ``configs/campaigns/`` are read as before: the newest ok run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from offload_lab.core import inputs, runs
from offload_lab.core.errors import InputError
from offload_lab.paper.discovery import experiment_module

CAMPAIGNS_DIR = Path("configs") / "campaigns"


@dataclass
class Selection:
    chosen: dict[str, Path | None]
    skipped: list[dict[str, Any]] = field(default_factory=list)


def campaign_files(repo_root: Path, campaign: str) -> list[tuple[Path, dict[str, Any]]]:
    """The campaign files of ``configs/campaigns/`` whose ``name`` is ``campaign`` (several files may add to one
    campaign: ``embedded-repeat.yaml`` adds repeated boots to ``embedded``), with their contents."""
    folder = Path(repo_root) / CAMPAIGNS_DIR
    found = []
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            data = inputs.read_yaml(path, "campaign file", expect=None)
        except InputError:  # `campaign check` names what is wrong with it; here it is not one of this campaign's
            continue
        if isinstance(data, dict) and data.get("name") == campaign:
            found.append((path, data))
    return found


def _normalized(kind: str, values: Any) -> Any:
    """Parameters as the experiment's model validates them; the raw values when it has no model or refuses them."""
    module = experiment_module(kind, "params")
    if module is None or not isinstance(values, dict):
        return values
    try:
        return module.Params.model_validate(values).model_dump(mode="json")
    except Exception:  # a run whose parameters no longer validate is, by definition, not what the file declares
        return {"__invalid__": values}


def declared(repo_root: Path, campaign: str) -> dict[str, tuple[str, list[Any]]] | None:
    """experiment -> (its folder, every parameter set a campaign file declares for it, validated); None when no
    campaign file has that name."""
    files = campaign_files(repo_root, campaign)
    if not files:
        return None
    out: dict[str, tuple[str, list[Any]]] = {}
    for _, data in files:
        for e in data.get("experiments") or []:
            kind = Path(str(e.get("notebook", ""))).stem
            params = _normalized(kind, e.get("parameters") or {})
            out.setdefault(str(e.get("experiment")), (kind, []))[1].append(params)
    return out


def _ok_runs_newest_first(data_root: Path, campaign: str, experiment: str,
                          skipped: list[dict[str, Any]]) -> list[Path]:
    found = []
    for r in runs.iter_runs(data_root, campaign, experiment):
        try:
            if runs.load_manifest(r).get("outcome") == "ok":
                found.append(r)
        except Exception as e:  # the paper cannot read that run; say so instead of passing over it in silence
            skipped.append({"experiment": experiment, "run_id": r.name,
                            "reason": f"its manifest cannot be read ({e}); see `offload-lab runs verify`"})
    return sorted(found, key=lambda p: p.name, reverse=True)


def select(data_root: Path, campaign: str, experiments: set[str], repo_root: Path) -> Selection:
    wanted = declared(repo_root, campaign)
    sel = Selection(chosen={})
    for e in sorted(experiments):
        candidates = _ok_runs_newest_first(data_root, campaign, e, sel.skipped)
        if wanted is None or e not in wanted:
            sel.chosen[e] = candidates[0] if candidates else None
            continue
        kind, allowed = wanted[e]
        sel.chosen[e] = None
        for run_dir in candidates:
            got = _normalized(kind, runs.load_manifest(run_dir).get("parameters"))
            if got in allowed:
                sel.chosen[e] = run_dir
                break
            sel.skipped.append({"experiment": e, "run_id": run_dir.name,
                                "reason": "its parameters differ from what the campaign file declares"})
    return sel
