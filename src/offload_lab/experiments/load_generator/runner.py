"""Copy the newest committed load-generator comparison of each stream level into a run, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offload_lab.core import paths, runs
from offload_lab.core.errors import InputError
from offload_lab.experiments.load_generator.params import Params

EXPERIMENT = "load_generator"
SOURCES = "sources.json"
# What `offload-lab compare` writes (its own constants live in offload_lab.bench, a layer above the experiments).
SOURCE_SUMMARY = "comparison.json"
SOURCE_WINDOWS = "windows.csv"
LEVELS = ("low", "high")  # the copies' names: a file per level, so a claim cites a fixed name


def comparison_file(level: str) -> str:
    return f"comparison-{level}.json"


def windows_file(level: str) -> str:
    return f"windows-{level}.csv"


def newest_run(bench_dir: Path, streams: int) -> Path:
    """The newest ``ok`` comparison run at ``streams`` (run ids sort by their start time)."""
    found = []
    for d in sorted(p for p in bench_dir.iterdir() if p.is_dir()) if bench_dir.is_dir() else []:
        manifest = d / runs.MANIFEST
        if not manifest.is_file() or not (d / SOURCE_SUMMARY).is_file() or not (d / SOURCE_WINDOWS).is_file():
            continue
        m = json.loads(manifest.read_text(encoding="utf-8"))
        if m.get("outcome") == "ok" and (m.get("parameters") or {}).get("concurrency") == streams:
            found.append(d)
    if not found:
        raise InputError(f"{bench_dir} holds no finished `offload-lab compare` run at {streams} stream(s): "
                         f"run one (`offload-lab compare --concurrency {streams}`) or change the parameters")
    return found[-1]


def run_experiment(run: runs.Run, url: str | None, params: Params) -> dict[str, Any]:
    """Copy each level's comparison and windows; ``sources.json`` names each source and its sha256."""
    del url  # needs no server
    root = paths.find_root()
    bench_dir = root / params.bench_dir
    sources = []
    for level, streams in zip(LEVELS, (params.streams_low, params.streams_high)):
        src = newest_run(bench_dir, streams)
        copies = []
        for name, target in ((SOURCE_SUMMARY, comparison_file(level)), (SOURCE_WINDOWS, windows_file(level))):
            data = (src / name).read_bytes()
            runs.atomic_write_bytes(run.file(target), data)
            copies.append({"source": str((src / name).relative_to(root)), "file": target,
                           "sha256": runs.sha256_file(src / name)})
        sources.append({"level": level, "streams": streams, "run_id": src.name, "files": copies})
    run.write_json(SOURCES, sources)
    return {"sources": sources}
