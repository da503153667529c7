"""Several pods' data merged into one campaign's data, without collisions.

Each source is a data root as a pod wrote it (``<src>/<campaign>/<experiment>/<run_id>/manifest.json`` and
``<src>/<campaign>/ledger.jsonl``). Everything is checked before anything is copied, so a refused merge leaves the
destination as it was:

- every finished run must verify against its own manifest (files missing, changed or added are refused); a run
  still marked ``running`` (its pod died or was taken down mid-run) has no file list yet: it is copied as it is and
  reported as unfinished;
- a run id seen in two sources with different manifests is refused: run ids (UTC second + 24 random bits) must be
  unique in a campaign (the same run in two sources, byte-identical, is one run: every pod gets the checkout's
  data/, so runs merged before come back from each pod);
- a run id already in the destination is skipped when its manifest is byte-identical (the merge run again) and
  refused otherwise.

Runs are copied into a hidden folder beside their place and renamed into it. Ledger lines are appended once each
(two different ``start`` lines for one session are a collision); the launcher's ``pod`` lines come last, and a pod
line that says nothing new is not appended again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offload_lab.campaigns import ledger
from offload_lab.campaigns.ledger import LEDGER_NAME, POD_EVENT
from offload_lab.core import runs
from offload_lab.core.errors import InputError


@dataclass
class MergeReport:
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    ledger_lines: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"copied": self.copied, "skipped": self.skipped, "unfinished": self.unfinished,
                "ledger_lines": self.ledger_lines}


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _run_dirs(root: Path, campaign: str) -> dict[str, Path]:
    return {p.name: p for p in runs.iter_runs(root, campaign) if not p.name.startswith(".")}


def _check_source(src: Path, campaign: str, have: dict[str, Path], seen: dict[str, Path], dest_root: Path,
                  report: MergeReport) -> list[tuple[Path, Path]]:
    todo = []
    for rid, run_dir in _run_dirs(src, campaign).items():
        rel = run_dir.relative_to(src)
        m = runs.load_manifest(run_dir)
        unfinished = m.get("outcome") == "running"
        problems = [] if unfinished else runs.verify_run(run_dir)
        if problems:
            raise InputError(f"{run_dir} does not verify against its manifest ({problems[0]}); nothing merged")
        if rid in seen:
            # The same run twice (the checkout synced to every pod held runs merged before): once is enough.
            if (seen[rid].relative_to(seen[rid].parents[2]) == rel
                    and _digest(seen[rid] / runs.MANIFEST) == _digest(run_dir / runs.MANIFEST)):
                continue
            raise InputError(f"run id {rid} comes from two sources ({seen[rid]} and {run_dir}) with different "
                             "manifests; run ids must be unique in a campaign, nothing merged")
        seen[rid] = run_dir
        if rid in have:
            if (have[rid].relative_to(dest_root) == rel
                    and _digest(have[rid] / runs.MANIFEST) == _digest(run_dir / runs.MANIFEST)):
                report.skipped.append(str(rel))
                continue
            raise InputError(f"run id {rid} of {run_dir} is already in {dest_root} as {have[rid]} with another "
                             "manifest: a collision, nothing merged")
        if unfinished:
            report.unfinished.append(str(rel))
        todo.append((run_dir, dest_root / rel))
    return todo


def merge(sources: list[Path], dest_root: Path, campaign: str,
          pod_lines: list[dict[str, Any]] | None = None) -> MergeReport:
    """Merge the campaign's runs and ledger lines of every source into ``dest_root``; see the module docstring."""
    runs.check_name("campaign", campaign)
    for src in sources:
        if not (Path(src) / campaign).is_dir():
            raise InputError(f"{src} has no {campaign}/ folder: give each pod's data root (the fetch command "
                             f"copies a pod's data to <plan dir>/<cluster>/data/{campaign}/)")
    report = MergeReport()
    have = _run_dirs(dest_root, campaign)
    seen: dict[str, Path] = {}
    todo = [t for src in sources for t in _check_source(Path(src), campaign, have, seen, dest_root, report)]
    lines = _ledger_lines(dest_root, sources, campaign, pod_lines or [])
    for src_dir, dst in todo:
        tmp = dst.parent / f".{dst.name}.merging"
        dst.parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)  # left by an interrupted merge: ours, never a run
        shutil.copytree(src_dir, tmp)
        os.replace(tmp, dst)
        report.copied.append(str(dst.relative_to(dest_root)))
    for obj in lines:
        ledger._append(dest_root / campaign / LEDGER_NAME, obj)  # the ledger's own append: one line, fsync'd
    report.ledger_lines = len(lines)
    return report


def _key(obj: dict[str, Any]) -> tuple[str, ...]:
    if obj.get("event") == POD_EVENT:
        return (POD_EVENT, *ledger.pod_key(obj))  # one line per launch: a relaunched name is paid twice
    return (str(obj.get("event")), str(obj.get("session")))


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal lines; a pod line is the same when only the time it was recorded differs."""
    drop = {"recorded_at"} if a.get("event") == POD_EVENT else set()
    return {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}


def _ledger_lines(dest_root: Path, sources: list[Path], campaign: str,
                  pod_lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """New lines to append, in source order, pod lines last; a line already there once is not appended again."""
    existing: dict[tuple[str, ...], dict[str, Any]] = {}
    dest = dest_root / campaign / LEDGER_NAME
    if dest.is_file():
        for e in runs.read_events(dest):
            existing[_key(e)] = e
    incoming = [e for src in sources if (Path(src) / campaign / LEDGER_NAME).is_file()
                for e in runs.read_events(Path(src) / campaign / LEDGER_NAME)]
    new: list[dict[str, Any]] = []
    for obj in incoming + list(pod_lines):
        k = _key(obj)
        if k in existing and _same(existing[k], obj):
            continue
        if k in existing and obj.get("event") != POD_EVENT:
            # A pod's later report (the cluster now down) supersedes its earlier line; a session's lines never change.
            raise InputError(f"ledger: two different {k[0]} lines for {k[1]} ({dest}); a collision, nothing merged")
        existing[k] = obj
        new.append(obj)
    return new
