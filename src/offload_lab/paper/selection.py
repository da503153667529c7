"""Which run of each experiment the paper reads.

Runs enter a paper only as what they are. By default it reads the runs of its campaign's sessions: those whose
manifest names a session of the campaign's ledger (:mod:`offload_lab.campaigns.ledger`; a campaign without a ledger
counts every run not marked ``hand_run``). A run made by hand (papermill, nbconvert or Jupyter outside
`campaign run`) is passed over and listed in ``claims.json`` with the reason, unless the user asks for it: `paper
build --hand-run RUN_ID` (or ``all``; $OFFLOAD_LAB_HAND_RUNS carries it into Quarto's hooks) or a ``hand_runs:`` list
in the campaign file. A hand run so admitted is marked: its :class:`HandRun` (which server, its own output notebook)
goes into ``claims.json``, the paper prints "by hand" beside each figure it feeds and counts it in Limits.

Among the runs admitted, the paper reads the newest ``ok`` run of the experiment whose parameters are those the campaign file declares for it, both sides
validated by the experiment's Params model (so a default written out and a default left out are the same). A run
made by hand into the campaign with other parameters is skipped, never printed: it is listed in ``claims.json`` and
in the build's log with the reason. Experiments the campaign file does not list (``boots``, written by the server)
and campaigns that have no file in ``configs/campaigns/`` are read as before: the newest ok run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


import os

from offload_lab.core import inputs, runs
from offload_lab.core.errors import InputError
from offload_lab.paper.discovery import experiment_module

CAMPAIGNS_DIR = Path("configs") / "campaigns"
HAND_RUNS_ENV = "OFFLOAD_LAB_HAND_RUNS"  # comma-separated run ids, or "all": set by `paper build --hand-run`
HAND_RUNS_KEY = "hand_runs"  # the campaign file's list of hand runs its paper reads
ALL = "all"


@dataclass
class Selection:
    chosen: dict[str, Path | None]
    skipped: list[dict[str, Any]] = field(default_factory=list)
    # experiment -> what the paper says about the hand run it reads (only runs admitted by the user)
    hand: dict[str, dict[str, Any]] = field(default_factory=dict)


def asked_hand_runs(repo_root: Path, campaign: str, env: Any = None) -> set[str]:
    """Run ids of hand runs the user asked the paper to read (``all`` for every one): from $OFFLOAD_LAB_HAND_RUNS
    and the campaign files' ``hand_runs:``."""
    env = os.environ if env is None else env
    asked = {w.strip() for w in str(env.get(HAND_RUNS_ENV) or "").split(",") if w.strip()}
    for _, data in campaign_files(repo_root, campaign):
        listed = data.get(HAND_RUNS_KEY) or []
        asked |= {str(x) for x in (listed if isinstance(listed, list) else [listed])}
    return asked


def session_ids(data_root: Path, campaign: str) -> set[str] | None:
    """The sessions of the campaign's ledger (a start line suffices: a session that died still made its runs);
    None when the campaign keeps no ledger."""
    path = Path(data_root) / campaign / runs.LEDGER_NAME
    if not path.is_file():
        return None
    return {str(e.get("session")) for e in runs.read_events(path) if e.get("event") == "start"}


def is_hand_run(manifest: dict[str, Any], sessions: set[str] | None) -> bool:
    """Made outside the campaign's sessions: marked so by the notebook, or naming no session of the ledger."""
    if manifest.get("hand_run") is True:
        return True
    return sessions is not None and str(manifest.get("session")) not in sessions


def hand_facts(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """What the paper prints about an admitted hand run: that it was made by hand, against which server (the URL as
    the manifest records it, redacted), and its own executed notebook when the run kept one."""
    server = manifest.get("server") if isinstance(manifest.get("server"), dict) else {}
    nb = manifest.get("notebook") if isinstance(manifest.get("notebook"), dict) else {}
    output = nb.get("output")
    own = (Path(run_dir) / output) if output else None
    if own is None or not own.is_file():
        own = next(iter(sorted(Path(run_dir).glob("*.ipynb"))), None)
    return {"run_id": manifest.get("run_id", Path(run_dir).name), "by": "hand",
            "server": server.get("url"), "model": server.get("model"),
            "notebook_output": str(own) if own is not None and own.is_file() else None}


class Admission:
    """Which runs of a campaign a paper may read: its sessions' runs, and the hand runs the user asked for."""

    def __init__(self, data_root: Path, campaign: str, repo_root: Path, env: Any = None) -> None:
        self.sessions = session_ids(Path(data_root), campaign)
        self.asked = asked_hand_runs(Path(repo_root), campaign, env)

    def hand(self, manifest: dict[str, Any]) -> bool:
        return is_hand_run(manifest, self.sessions)

    def admits(self, run_dir: Path, manifest: dict[str, Any]) -> bool:
        if not self.hand(manifest):
            return True
        return ALL in self.asked or str(manifest.get("run_id", Path(run_dir).name)) in self.asked


def passed_over(experiment: str, run_dir: Path) -> dict[str, Any]:
    return {"experiment": experiment, "run_id": run_dir.name, "by": "hand",
            "reason": "made by hand, outside the campaign's sessions (its ledger); to read it, pass "
                      f"`--hand-run {run_dir.name}` to `paper build` or list it under {HAND_RUNS_KEY}: in the "
                      "campaign file, and the paper will mark it"}


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


def select(data_root: Path, campaign: str, experiments: set[str], repo_root: Path, env: Any = None) -> Selection:
    wanted = declared(repo_root, campaign)
    admission = Admission(data_root, campaign, repo_root, env)
    sel = Selection(chosen={})
    for e in sorted(experiments):
        candidates = _ok_runs_newest_first(data_root, campaign, e, sel.skipped)
        kind, allowed = wanted[e] if wanted is not None and e in wanted else (None, None)
        sel.chosen[e] = None
        for run_dir in candidates:
            manifest = runs.load_manifest(run_dir)
            if not admission.admits(run_dir, manifest):
                sel.skipped.append(passed_over(e, run_dir))
                continue
            if allowed is not None and _normalized(kind, manifest.get("parameters")) not in allowed:
                sel.skipped.append({"experiment": e, "run_id": run_dir.name,
                                    "reason": "its parameters differ from what the campaign file declares"})
                continue
            sel.chosen[e] = run_dir
            if admission.hand(manifest):
                sel.hand[e] = hand_facts(run_dir, manifest)
            break
    return sel
