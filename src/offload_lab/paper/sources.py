"""What a claim or figure may read: the files it cites from one run (:class:`Sources`) or from every finished run
(:class:`RunSet`), each checked against its run's manifest before it is read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from offload_lab.core import runs
from offload_lab.core.errors import ClaimError


@dataclass(frozen=True)
class SourceFile:
    """A file a claim or figure read, as it was when it was read."""

    path: str  # relative to the repository root when inside it, absolute otherwise
    sha256: str
    bytes: int


# --------------------------------------------------------------------------------------------------------------------


def split_cited(name: str, experiment: str) -> tuple[str, str]:
    """``"concurrency:regimes.csv"`` → (``concurrency``, ``regimes.csv``); a plain name belongs to ``experiment``."""
    if ":" in name:
        exp, _, rel = name.partition(":")
        return exp, rel
    return experiment, name


def experiments_of(experiment: str, files: Iterable[str]) -> tuple[str, ...]:
    out = [experiment]
    for f in files:
        exp, _ = split_cited(f, experiment)
        if exp not in out:
            out.append(exp)
    return tuple(out)


class Sources:
    """The files that one claim (or figure) cites, in one run per experiment; reading any other file is an error.

    ``run_dir`` and ``manifest`` are the run of the claim's own experiment; ``others`` maps each other experiment
    its files name (``"concurrency:regimes.csv"``) to that experiment's (run directory, manifest).
    """

    def __init__(self, owner: str, run_dir: Path, manifest: dict[str, Any], files: Iterable[str],
                 others: Mapping[str, tuple[Path, dict[str, Any]]] | None = None):
        self.owner = owner
        self.run_dir = Path(run_dir)
        self._manifest = manifest
        self.files = tuple(files)
        self._others = dict(others or {})
        self.experiment = manifest.get("experiment")

    @property
    def run_id(self) -> str:
        return str(self._manifest.get("run_id", self.run_dir.name))

    @property
    def outcome(self) -> str | None:
        return self._manifest.get("outcome")

    def path(self, name: str) -> Path:
        if name not in self.files:
            raise ClaimError(f"{self.owner} reads {name} but does not cite it; add it to its files")
        if ":" in name:
            exp, rel = split_cited(name, "")
            if exp != self.experiment:
                if exp not in self._others:
                    raise ClaimError(f"{self.owner} reads {name} but has no run of {exp}")
                return Path(self._others[exp][0]) / rel
            return self.run_dir / rel
        return self.run_dir / name

    def has(self, name: str) -> bool:
        """Whether a cited file exists in its run (for files a run writes only sometimes)."""
        return self.path(name).is_file()

    def text(self, name: str) -> str:
        return self.path(name).read_text(encoding="utf-8")

    def json(self, name: str) -> Any:
        return json.loads(self.text(name))

    def csv(self, name: str) -> Any:
        import pandas as pd  # imported here: claims about JSON files should not pay for pandas

        return pd.read_csv(self.path(name))

    def events(self, name: str = runs.EVENTS) -> list[dict[str, Any]]:
        return runs.read_events(self.path(name))

    @property
    def manifest(self) -> dict[str, Any]:
        self.path(runs.MANIFEST)
        return self._manifest

    @property
    def parameters(self) -> dict[str, Any]:
        return self.manifest.get("parameters") or {}

    def manifest_of(self, experiment: str) -> dict[str, Any]:
        """The manifest of another experiment's run, when the claim cites ``experiment:manifest.json``."""
        if experiment == self.experiment:
            return self.manifest
        self.path(f"{experiment}:{runs.MANIFEST}")
        return self._others[experiment][1]

    def parameters_of(self, experiment: str) -> dict[str, Any]:
        return self.manifest_of(experiment).get("parameters") or {}


class RunSet:
    """Every finished run of one experiment (oldest first) that a claim with ``scope="all"`` reads."""

    def __init__(self, owner: str, experiment: str, runs_: list[Sources]):
        self.owner = owner
        self.experiment = experiment
        self.runs = runs_

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)


def display_path(path: Path, repo_root: Path | None) -> str:
    """Path relative to the repository root when it lies inside it (what readers can follow), else absolute."""
    path = Path(path).resolve()
    if repo_root is not None:
        try:
            return path.relative_to(Path(repo_root).resolve()).as_posix()
        except ValueError:
            pass
    return path.as_posix()


class HashCache:
    """sha256 by (path, size, mtime): many claims cite the same file, and hashing it once is enough."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int, int], str] = {}

    def sha256(self, path: Path) -> str:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in self._cache:
            self._cache[key] = runs.sha256_file(path)
        return self._cache[key]


def verify_cited(
    owner: str,
    run_dir: Path,
    manifest: dict[str, Any],
    files: Iterable[str],
    repo_root: Path | None,
    hashes: HashCache | None = None,
) -> list[SourceFile]:
    """Check each cited file against the run's manifest; raise ClaimError naming ``owner`` and the file."""
    hashes = hashes or HashCache()
    recorded = manifest.get("files") or {}
    run_id = manifest.get("run_id", Path(run_dir).name)
    out = []
    for name in files:
        name = split_cited(name, "")[1]
        p = Path(run_dir) / name
        shown = display_path(p, repo_root)
        if name == runs.MANIFEST:
            # The manifest is the root of trust: it cannot list its own hash, so record what was read.
            out.append(SourceFile(shown, hashes.sha256(p), p.stat().st_size))
            continue
        if name not in recorded:
            raise ClaimError(f"{owner}: {shown} is not listed in the manifest of run {run_id}; it cannot be cited")
        if not p.is_file():
            raise ClaimError(f"{owner}: {shown} is missing (the manifest of run {run_id} lists it)")
        actual = hashes.sha256(p)
        want = recorded[name].get("sha256")
        if actual != want:
            raise ClaimError(
                f"{owner}: {shown} was changed after run {run_id} ended: sha256 {actual[:12]}… differs from the "
                f"manifest's {str(want)[:12]}…"
            )
        out.append(SourceFile(shown, actual, p.stat().st_size))
    return out


# --------------------------------------------------------------------------------------------------------------------
# Resolution
