"""The paper's data lock: the content hash of every file it cites and every manifest of the runs it read.

``paper build`` writes ``paper.lock.json`` next to the paper. ``paper build --frozen`` (for a release, and in CI for
the committed data) also compares every one of those files with its committed version (``git show HEAD:path``): a
manifest only vouches for the files beside it, so editing a data file *and* its manifest's sha256 passes every other
check, and only the committed history catches it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.core.errors import ClaimError, InputError
from offload_lab.paper.claims import ClaimSet
from offload_lab.paper.figures import FigureRecord

LOCK = "paper.lock.json"
LOCK_SCHEMA = 1


def _abs(path: str, repo_root: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else Path(repo_root) / p


def locked_files(claims: ClaimSet, figures: dict[str, FigureRecord | None], repo_root: Path) -> dict[str, Path]:
    """Every file a printed claim or a drawn figure read, and the manifest of every run read, by displayed path."""
    out: dict[str, Path] = {}
    for c in claims.ok():
        for f in c.files:
            out[f.path] = _abs(f.path, repo_root)
    for r in figures.values():
        for f in r.files if r is not None else []:
            out[f.path] = _abs(f.path, repo_root)
    for info in claims.runs.values():
        manifest = Path(info.path) / runs.MANIFEST
        out[(Path(info.path) / runs.MANIFEST).as_posix()] = _abs(manifest.as_posix(), repo_root)
    return dict(sorted(out.items()))


def locked_runs(claims: ClaimSet) -> dict[str, str]:
    """The run each experiment's claims read, by experiment (the run directory as the paper displays it)."""
    return {e: info.path for e, info in sorted(claims.runs.items())}


def write_lock(target: Path, campaign: str, files: dict[str, Path],
               runs_read: dict[str, str] | None = None) -> dict[str, Any]:
    lock = {"schema": LOCK_SCHEMA, "campaign": campaign, "runs": runs_read or {},
            "files": {name: {"sha256": runs.sha256_file(p), "bytes": p.stat().st_size} for name, p in files.items()}}
    runs.atomic_write_json(target, lock)
    target.chmod(0o644)
    return lock


@lru_cache(maxsize=64)
def _git_top(directory: Path) -> Path | None:
    proc = subprocess.run(["git", "-C", str(directory), "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True, check=False)
    return Path(proc.stdout.strip()).resolve() if proc.returncode == 0 else None


def _committed(path: Path) -> bytes | None:
    """The file as HEAD has it, or None when the file is not in a git repository or not committed there."""
    top = _git_top(path.resolve().parent)
    if top is None:
        return None
    rel = path.resolve().relative_to(top).as_posix()
    proc = subprocess.run(["git", "-C", str(top), "show", f"HEAD:{rel}"], capture_output=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def check_frozen(files: dict[str, Path]) -> int:
    """Fail (ClaimError, exit 5) unless every file equals its committed version; returns how many were checked."""
    problems = []
    for name, p in files.items():
        if not p.is_file():
            problems.append(f"{name}: missing")
            continue
        committed = _committed(p)
        if committed is None:
            if _git_top(p.resolve().parent) is None:
                raise InputError(f"--frozen: {name} is not inside a git repository; frozen builds compare the data "
                                 "with its committed version, so commit the campaign's data first")
            problems.append(f"{name}: not committed (git show HEAD:… has no such file)")
        elif hashlib.sha256(committed).hexdigest() != runs.sha256_file(p):
            problems.append(f"{name}: differs from the committed version (HEAD)")
    if problems:
        shown = "\n  ".join(problems[:25]) + (f"\n  … and {len(problems) - 25} more" if len(problems) > 25 else "")
        raise ClaimError(f"--frozen: {len(problems)} file(s) the paper reads are not as committed:\n  {shown}\n"
                         "Restore them (git checkout -- PATH), or commit the new data and build again.")
    return len(files)


def read_lock(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{path}: not a readable paper lock ({e}); build the paper again") from e
    if not isinstance(d, dict) or not isinstance(d.get("files"), dict):
        raise InputError(f"{path}: not a paper lock (no files mapping); build the paper again")
    return d


def run_changes(previous: Path, claims: ClaimSet, data_root: Path, repo_root: Path) -> list[str]:
    """Where this build reads other runs than it should: a run the last build's lock (``previous``) names that is
    gone or passed over, and a committed run of an experiment the paper reads that is gone from the working tree
    (the paper would silently fall back to an older run with the same parameters). One line each."""
    now = locked_runs(claims)
    out: list[str] = []
    before: dict[str, str] = {}
    if Path(previous).is_file():
        with contextlib.suppress(InputError):
            lock = read_lock(previous)
            if lock.get("campaign") == claims.campaign and isinstance(lock.get("runs"), dict):
                before = {str(k): str(v) for k, v in lock["runs"].items()}
    for experiment, old in sorted(before.items()):
        new = now.get(experiment)
        if new == old:
            continue
        why = "is gone" if not _abs(old, repo_root).is_dir() else "is passed over"
        out.append(f"{experiment}: the locked run {old} {why}; this build reads "
                   f"{new or 'no run (its claims print n/a)'} instead")
    for experiment in sorted(set(now) | set(claims.absent) | set(before)):
        folder = Path(data_root) / claims.campaign / experiment
        for gone in _committed_runs_missing(folder):
            if not any(gone in line for line in out):
                out.append(f"{experiment}: run {gone} is committed but gone from the working tree; this build reads "
                           f"{now.get(experiment) or 'no run'} instead (git checkout -- {gone} restores it)")
    return out


def _committed_runs_missing(folder: Path) -> list[str]:
    """Run directories HEAD has under ``folder`` that the working tree lacks (as git names them)."""
    parent = folder if folder.is_dir() else folder.parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    top = _git_top(parent.resolve())
    if top is None:
        return []
    try:
        rel = folder.resolve().relative_to(top).as_posix()
    except ValueError:
        return []
    proc = subprocess.run(["git", "-C", str(top), "ls-tree", "-d", "--name-only", "HEAD", rel + "/"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return []
    return [line for line in proc.stdout.splitlines() if line and not (top / line).is_dir()]
