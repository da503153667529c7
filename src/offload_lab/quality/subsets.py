"""Fixed subsets: item ids chosen once with a recorded seed, stored in the package, never re-drawn at run time.

A subset file (``resources/quality/subsets/<benchmark>.json``) holds the benchmark, the method and seed that chose
it, the sha256 of the data file it was chosen from, and the item ids in file order; no benchmark text. Choosing is
``random.Random(seed).sample(ids in file order, n)``, so anyone can re-derive the ids from the data file and the
seed (``offload-lab quality subset --check``). Pre-registering the subset is what makes two runs months apart
comparable item by item.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Sequence

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.quality import data

METHOD = "random.Random(seed).sample(ids in file order, n), then sorted back into file order"
SEED = 20261129
SIZES = {"gsm8k": 150, "ifeval": 150, "humaneval": 164}


@dataclass(frozen=True)
class Subset:
    benchmark: str
    n: int
    seed: int | None
    method: str
    source: dict[str, str]
    ids: tuple[str, ...]

    def to_json(self) -> dict:
        d = asdict(self)
        d["ids"] = list(self.ids)
        return d


def subsets_dir() -> Path:
    return Path(str(resources.files("offload_lab") / "resources" / "quality" / "subsets"))


def choose(benchmark: str, ids: Sequence[str], n: int, seed: int = SEED) -> Subset:
    """Draw ``n`` ids (all of them when ``n`` is the whole set), kept in file order."""
    if n > len(ids):
        raise InputError(f"{benchmark}: a subset of {n} items asked for, the file has {len(ids)}")
    if n == len(ids):
        chosen = list(ids)
        method, used_seed = "all items, file order", None
    else:
        picked = set(random.Random(seed).sample(list(ids), n))
        chosen = [i for i in ids if i in picked]
        method, used_seed = METHOD, seed
    return Subset(benchmark, n, used_seed, method, data.provenance(benchmark), tuple(chosen))


def write(subset: Subset, directory: Path | None = None) -> Path:
    path = (directory or subsets_dir()) / f"{subset.benchmark}.json"
    runs.atomic_write_json(path, subset.to_json())
    return path


def load(benchmark: str, directory: Path | None = None) -> Subset:
    path = (directory or subsets_dir()) / f"{benchmark}.json"
    if not path.is_file():
        raise InputError(f"no fixed subset for {benchmark} at {path}; create it once with "
                         f"`offload-lab quality subset --benchmark {benchmark} --write`")
    d = json.loads(path.read_text(encoding="utf-8"))
    return Subset(d["benchmark"], d["n"], d.get("seed"), d["method"], d["source"], tuple(d["ids"]))


def rederive(benchmark: str, datasets: str | Path | None = None, allow_download: bool = False) -> Subset:
    """The subset as the recorded seed draws it from the data file now."""
    stored = load(benchmark)
    ids = [it.item_id for it in data.items(benchmark, datasets, allow_download)]
    return choose(benchmark, ids, stored.n, stored.seed if stored.seed is not None else SEED)


def subset_items(benchmark: str, datasets: str | Path | None = None, allow_download: bool = False,
                 limit: int | None = None) -> list[data.Item]:
    """The items of the stored subset, in subset order; ``limit`` keeps the first ``limit`` (a smoke run)."""
    stored = load(benchmark)
    source_sha = stored.source.get("sha256")
    if source_sha != data.provenance(benchmark).get("sha256"):
        raise InputError(f"the stored {benchmark} subset was chosen from a file with sha256 {source_sha}, not the "
                         f"pinned one; the subset and the data file do not belong together")
    by_id = {it.item_id: it for it in data.items(benchmark, datasets, allow_download)}
    missing = [i for i in stored.ids if i not in by_id]
    if missing:
        raise InputError(f"{benchmark} subset names ids not in the data file: {missing[:5]}")
    ids = stored.ids if limit is None else stored.ids[:limit]
    return [by_id[i] for i in ids]
