"""Run directories: where every measurement lands, and the manifest that vouches for it.

A run lives at ``<data_root>/<campaign>/<experiment>/<run_id>/`` and is never overwritten. Its ``manifest.json`` is
written when the run starts (outcome ``running``) so that a run that crashes is still on disk and marked; it is
rewritten atomically when the run ends, with the sha256 of every other file in the directory. Raw events go to
append-only JSON Lines files; derived tables can always be recomputed from them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator


from offload_lab.core import signals
from offload_lab.core.errors import InputError
from offload_lab.core.inputs import DATA_MAX_BYTES, check_dir, read_json
from offload_lab.core.paths import DATA_DIR
from offload_lab.core.places import MANIFEST  # noqa: F401  (runs.MANIFEST: the API; named where a run folder is recognised)
from offload_lab.core.procs import process_gone, process_identity
from offload_lab.core.eventlog import EventLog, read_events, start_on_fresh_line  # noqa: F401  (runs.read_events: the API)
from offload_lab.core.redact import redact_record, redacted_json_bytes

EVENTS = "events.jsonl"  # a run's append-only event log (Run.events, read_events)
LEDGER_NAME = "ledger.jsonl"  # <data>/<campaign>/: campaigns.ledger writes its sessions, paper.selection reads them
SCHEMA_VERSION = 1
OUTCOMES = ("running", "ok", "failed", "stopped")
# What `runs list` and `runs verify` report besides the outcome: a run still `running` whose process is gone, and a
# run directory whose manifest cannot be read.
ABANDONED = "abandoned"
CORRUPT = "corrupt"
# Paths the dirty check of the code ignores: a run's own writes land in data/ and must not make the code look dirty.
DATA_PATHS = (DATA_DIR,)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_run_id() -> str:
    # Time first so that a listing sorts by start; random tail so two runs started in the same second differ.
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same directory and rename it, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_savefig(fig: Any, path: Path | str, **kwargs: Any) -> None:
    """Save a matplotlib figure through a temporary file and a rename, like every other file of a run."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format=kwargs.pop("format", path.suffix.lstrip(".")), **kwargs)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    """JSON, atomically, after the one redaction (:mod:`offload_lab.core.redact`): a record may quote a URL or a
    server's answer, and neither may carry a secret to disk."""
    atomic_write_bytes(path, redacted_json_bytes(
        obj, lambda o: json.dumps(o, indent=2, sort_keys=False, default=str) + "\n"))


def git_state(start: Path | None = None, exclude: tuple[str, ...] = DATA_PATHS) -> dict[str, Any]:
    """Commit and dirty flag of the code in the repository holding ``start`` (the working directory by default).

    The data a run writes (``data/``) is not code: it is left out of the dirty check, so ``dirty`` says whether the
    code differed from the commit; ``dirty_paths`` says which tracked files did (at most 50 listed).
    """
    cwd = str(start or Path.cwd())

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.rstrip("\n") if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no", "--", ":/",
                 *[f":(top,exclude){p}" for p in exclude])
    paths = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return {"commit": commit.strip() if commit else commit, "dirty": None if status is None else bool(paths),
            "dirty_paths": paths[:50], "dirty_excludes": list(exclude)}


# A name becomes one path component (most file systems allow 255 bytes) inside paths that get long: 100 leaves room.
MAX_NAME = 100


def check_name(kind: str, value: str) -> str:
    if isinstance(value, str) and len(value) > MAX_NAME:
        raise InputError(f"{kind} name {value[:40]!r}... is {len(value)} characters long; use at most {MAX_NAME} "
                         "(it becomes a directory name)")
    if not _NAME_RE.match(value or ""):
        raise InputError(
            f"{kind} name {value!r} is not usable as a directory name: use letters, digits, '_', '.' and '-'"
        )
    return value


@dataclass
class Run:
    """A run directory being written. Create with :func:`new_run`; end with :meth:`finish`."""

    path: Path
    manifest: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]

    def file(self, name: str) -> Path:
        return self.path / name

    def events(self, name: str = EVENTS) -> EventLog:
        return EventLog(self.path / name)

    def write_json(self, name: str, obj: Any) -> Path:
        # Records (boot.json, side.json, ...) carry URLs and commands: credentials never reach the file.
        atomic_write_json(self.path / name, redact_record(obj))
        return self.path / name

    def write_text(self, name: str, text: str) -> Path:
        atomic_write_text(self.path / name, text)
        return self.path / name

    def write_table(self, name: str, frame: Any) -> Path:
        """Write a pandas DataFrame as CSV (``.csv``) or Parquet (``.parquet``), atomically."""
        target = self.path / name
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=self.path)
        os.close(fd)
        try:
            if name.endswith(".parquet"):
                frame.to_parquet(tmp, index=False)
            else:
                frame.to_csv(tmp, index=False)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def update(self, **fields: Any) -> None:
        """Merge fields into the manifest and write it now (used for facts learnt mid-run)."""
        self.manifest.update(fields)
        write_manifest(self.path, self.manifest)

    def finish(self, outcome: str = "ok", error: str | None = None, **fields: Any) -> dict[str, Any]:
        if outcome not in OUTCOMES or outcome == "running":
            raise ValueError(f"outcome must be one of ok, failed, stopped, not {outcome!r}")
        self.manifest.update(fields)
        self.manifest["outcome"] = outcome
        self.manifest["error"] = error
        self.manifest["ended_at"] = utc_now()
        self.manifest["files"] = hash_files(self.path)
        write_manifest(self.path, self.manifest)
        return self.manifest


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """The manifest, atomically, with every URL's credentials and secret flag values redacted."""
    atomic_write_json(Path(run_dir) / MANIFEST, redact_record(manifest))


def hash_files(run_dir: Path, strange: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """sha256 and size of every regular file of a run. Nothing is followed: a symlink (to a file, a folder, a loop,
    or outside the run), a FIFO, a socket or a device is never read, and is named in ``strange`` when given."""
    out: dict[str, dict[str, Any]] = {}
    root = Path(run_dir)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for name in sorted(dirnames):
            if (here / name).is_symlink() and strange is not None:
                strange.append(f"{here / name}: a symbolic link (to {os.readlink(here / name)}), not a folder of "
                               "the run")
        for name in sorted(filenames):
            p = here / name
            if name.startswith(".") or (here == root and name == MANIFEST):
                continue
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                if strange is not None:
                    kind = "a symbolic link (to " + os.readlink(p) + ")" if stat.S_ISLNK(st.st_mode) else \
                        "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
                    strange.append(f"{p}: {kind}; a run holds only regular files")
                continue
            out[p.relative_to(root).as_posix()] = {"sha256": sha256_file(p), "bytes": st.st_size}
    return dict(sorted(out.items()))


def new_run(
    data_root: Path | str,
    campaign: str,
    experiment: str,
    parameters: dict[str, Any] | None = None,
    *,
    run_id: str | None = None,
    environment: dict[str, Any] | None = None,
    **fields: Any,
) -> Run:
    """Create a fresh run directory and its initial manifest. An existing directory is never reused."""
    check_name("campaign", campaign)
    check_name("experiment", experiment)
    run_id = run_id or new_run_id()
    check_name("run id", run_id)
    check_dir(data_root, "data root (--data-dir)", write=True)
    path = Path(data_root) / campaign / experiment / run_id
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        raise InputError(f"run directory {path} already exists; runs are never overwritten, choose another run id")
    manifest: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "run_id": run_id,
        "campaign": campaign,
        "experiment": experiment,
        "parameters": parameters or {},
        "started_at": utc_now(),
        "ended_at": None,
        "outcome": "running",
        "error": None,
        "git": git_state(),
        # Who writes the run: a run left `running` by a process that is gone is reported as abandoned.
        "process": process_identity(),
    }
    if environment is not None:
        manifest["environment"] = environment
    manifest.update(fields)
    write_manifest(path, manifest)
    return Run(path=path, manifest=manifest)


def load_manifest(run_dir: Path | str) -> dict[str, Any]:
    """A run's manifest; InputError naming the manifest when it is missing, unreadable or not a manifest's shape."""
    p = Path(run_dir) / MANIFEST
    if not Path(run_dir).is_dir():
        raise InputError(f"{run_dir} is not a directory: give a run directory (`offload-lab runs list` shows them)")
    if not p.is_file():
        raise InputError(f"{run_dir} has no {MANIFEST}: not a run directory")
    m = read_json(p, "run manifest", DATA_MAX_BYTES, expect=dict)
    files = m.get("files")
    if files is not None and not (isinstance(files, dict) and all(
            isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in files.values())):
        raise InputError(f"run manifest {p}: field 'files' must map each file to its sha256; the manifest is "
                         "damaged (restore it from version control)")
    if m.get("outcome") not in OUTCOMES:
        raise InputError(f"run manifest {p}: outcome {m.get('outcome')!r} is not one of {', '.join(OUTCOMES)}; the "
                         "manifest is damaged")
    return m


def run_status(manifest: dict[str, Any]) -> str:
    """The outcome, or ``abandoned`` for a run still marked running whose process is gone (this host only)."""
    outcome = manifest.get("outcome")
    if outcome == "running" and process_gone(manifest.get("process")):
        return ABANDONED
    return str(outcome)


def verify_run(run_dir: Path | str) -> list[str]:
    """Problems with a finished run: files missing, changed, or added since the manifest was written.

    A run not finished (running, or abandoned by its process) has no list of files yet: that is the one problem
    reported, rather than every file it wrote taken for one added after the end.
    """
    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    status = run_status(manifest)
    if status == ABANDONED:
        proc = manifest.get("process") or {}
        return [f"{run_dir}: abandoned: marked running, but its process {proc.get('pid')} on {proc.get('host')} is "
                "gone; its files were never hashed"]
    if status == "running":
        return [f"{run_dir}: still running (started {manifest.get('started_at')}): its files are hashed when it ends"]
    problems: list[str] = []
    recorded = manifest.get("files") or {}
    actual = hash_files(run_dir, problems)
    for rel, meta in recorded.items():
        rel_path = Path(rel)
        if rel_path.is_absolute() or ".." in rel_path.parts:
            problems.append(f"{run_dir}: the manifest vouches for {rel[:200]!r}, outside the run")
        elif rel not in actual:
            problems.append(f"{run_dir / rel}: listed in the manifest but missing")
        elif actual[rel]["sha256"] != meta["sha256"]:
            problems.append(f"{run_dir / rel}: sha256 differs from the manifest (the file was changed)")
    for rel in sorted(actual.keys() - recorded.keys()):
        problems.append(f"{run_dir / rel}: not listed in the manifest (added after the run ended)")
    return problems


@dataclass
class RunRow:
    """One run directory as a listing shows it: its manifest, or why it cannot be read."""

    path: Path
    manifest: dict[str, Any] | None
    status: str
    problem: str | None = None


def campaign_dir(data_root: Path | str, campaign: str) -> Path:
    """A campaign's directory, which must exist: InputError naming the campaigns there otherwise."""
    check_name("campaign", campaign)
    root = check_dir(data_root, "data root (--data-dir)", must_exist=True)
    base = root / campaign
    if not base.is_dir():
        there = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        raise InputError(f"no campaign {campaign!r} under {root} (campaigns there: {', '.join(there) or 'none'})")
    return base


def scan_runs(data_root: Path | str, campaign: str, experiment: str | None = None) -> list[RunRow]:
    """Every run directory of a campaign, a damaged one as a row with its problem, so one bad manifest never hides
    the others. The campaign (and the experiment, when named) must exist."""
    base = campaign_dir(data_root, campaign)
    if experiment is not None:
        check_name("experiment", experiment)
        if not (base / experiment).is_dir():
            there = sorted(p.name for p in base.iterdir() if p.is_dir())
            raise InputError(f"campaign {campaign!r} has no experiment {experiment!r} (it has: "
                             f"{', '.join(there) or 'none'})")
    rows = []
    experiments = [base / experiment] if experiment else sorted(p for p in base.iterdir() if p.is_dir())
    for exp in experiments:
        for run_dir in sorted(p for p in exp.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                m = load_manifest(run_dir)
            except InputError as e:
                rows.append(RunRow(run_dir, None, CORRUPT, str(e)))
                continue
            rows.append(RunRow(run_dir, m, run_status(m)))
    return rows


def iter_runs(data_root: Path | str, campaign: str, experiment: str | None = None) -> Iterator[Path]:
    base = Path(data_root) / campaign
    experiments: Iterable[Path] = [base / experiment] if experiment else sorted(p for p in base.glob("*") if p.is_dir())
    for exp in experiments:
        if not exp.is_dir():
            continue
        for run_dir in sorted(exp.iterdir()):
            if (run_dir / MANIFEST).is_file():
                yield run_dir


def latest_run(data_root: Path | str, campaign: str, experiment: str, outcome: str | None = "ok") -> Path | None:
    """The newest run of an experiment (by run id, which starts with the UTC start time) with the given outcome."""
    best = None
    for run_dir in iter_runs(data_root, campaign, experiment):
        if outcome is None or load_manifest(run_dir).get("outcome") == outcome:
            best = run_dir
    return best


def attach_run(run_dir: Path | str) -> Run:
    """Reopen a run that another process created (the campaign runner hands its run directory to a notebook)."""
    path = Path(run_dir)
    return Run(path=path, manifest=load_manifest(path))


def attach_for_writing(run_dir: Path | str) -> Run:
    """A run a notebook is handed to write into: it must still be ``running``. A finished run is sealed (its files
    hashed in its manifest): writing into it would change what ``runs verify`` vouches for."""
    run = attach_run(run_dir)
    outcome = run.manifest.get("outcome")
    if outcome != "running":
        raise InputError(f"run_dir {run_dir}: that run is finished ({outcome}) and sealed; a hand run makes its own "
                         "run directory (leave run_dir out), and only the campaign runner hands one over")
    return run


def open_run(run_dir: Path | str | None, data_root: Path | str, campaign: str, experiment: str,
             parameters: dict[str, Any]) -> tuple[Run, bool]:
    """The run a notebook writes into, and whether the notebook owns it (must finish it itself).

    Under the campaign runner ``run_dir`` is given and the runner finishes the run; run by hand in Jupyter it is
    None and the notebook makes and finishes its own run.
    """
    if run_dir:
        return attach_for_writing(run_dir), False
    from offload_lab.core.environment import capture_environment

    return new_run(data_root, campaign, experiment, parameters, environment=capture_environment()), True


@contextlib.contextmanager
def finishing(run: Run, stopped: tuple[type[BaseException], ...] = (KeyboardInterrupt,)) -> Iterator[Run]:
    """Finish a run however the block ends: ``ok``, ``stopped`` for the exceptions named, ``failed`` otherwise;
    the exception goes on. Nothing a failed run wrote is removed."""
    try:
        yield run
    except BaseException as e:
        run.finish("stopped" if isinstance(e, stopped) else "failed", error=signals.reason_of(e))
        raise
    run.finish("ok")


def finishing_if_owned(run: Run, owned: bool,
                       stopped: tuple[type[BaseException], ...] = (KeyboardInterrupt,)) -> Any:
    """For notebooks: finish the run at the end of the block when the notebook made it (run by hand); under the
    campaign runner, which finishes it, do nothing."""
    return finishing(run, stopped) if owned else contextlib.nullcontext(run)
