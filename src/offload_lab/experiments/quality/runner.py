"""The ``quality`` experiment: run each side, score it, compare them; and the pieces the CLI runs alone.

A run directory holds one directory per side, ``sides/<label>/``:

- ``side.json``: the endpoint's settings (the API key's variable name, never the key), the model, benchmarks,
  subsets and items used, data provenance, the prompt protocol, and whether the side is valid;
- ``canaries.json``: the canary checks with their requests and responses;
- ``items.jsonl``: one raw record per item and replicate (request, response, attempts, status);
- ``scores.csv``, ``ifeval_instructions.csv``, ``summary.csv``, ``scoring.json``: derived from ``items.jsonl``.

A comparison run (experiment ``quality``) also holds ``comparison.json`` (everything), ``comparison.csv`` (one row
per benchmark), ``paired_items.csv`` (every paired item, flips marked) and ``quality.json`` (both endpoints'
settings and whether the run is valid). ``offload-lab quality run`` writes a
single side into a run of experiment ``quality-side``; ``offload-lab quality compare`` copies two sides into a new
``quality`` run and compares them.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from offload_lab.core import runs
from offload_lab.core.errors import InputError, ProducerError
from offload_lab.quality import benchmarks as bench, canaries, compare as cmp, data, endpoints, humaneval, ifeval, paired
from offload_lab.quality import runner, scoring, subsets

SIDES = "sides"
COMPARISON_JSON = "comparison.json"
COMPARISON_CSV = "comparison.csv"
PAIRED_ITEMS = "paired_items.csv"
QUALITY_JSON = "quality.json"
ROLES = ("reference", "local")


class QualityParams(BaseModel):
    """Parameters of the ``quality`` experiment (the notebook's, and the campaign file's)."""

    model_config = ConfigDict(extra="forbid")

    benchmarks: list[str] = Field(default_factory=lambda: list(data.BENCHMARKS))
    limit: int | None = Field(None, ge=1, description="first N items of each fixed subset (a smoke run); None: all")
    replicates: int = Field(2, ge=1, description="times each side answers each item; 2 gives the noise floor")
    max_tokens: dict[str, int] = Field(default_factory=dict, description="per benchmark; default 1024/1280/1024")
    local: dict[str, Any] = Field(default_factory=dict, description="EndpointSpec fields for the local side")
    reference: dict[str, Any] | None = Field(
        None, description="EndpointSpec fields (with url) for the reference API; None: the local server again")
    datasets: str | None = Field(None, description="dataset directory; default $OFFLOAD_LAB_DATASETS")
    allow_download: bool = False
    resamples: int = Field(paired.DEFAULT_RESAMPLES, ge=100)
    seed: int = 0
    exec_timeout_s: float = Field(humaneval.DEFAULT_TIMEOUT_S, gt=0)
    on_canary_failure: Literal["stop", "continue"] = Field(
        "stop", description="stop: skip the items of an invalid side; continue: send them, keep them unscored")

    @field_validator("benchmarks")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [b for b in v if b not in data.BENCHMARKS]
        if unknown or not v:
            raise ValueError(f"benchmarks must be among {list(data.BENCHMARKS)}, got {v}")
        return list(dict.fromkeys(v))


@dataclass
class SideResult:
    path: Path
    valid: bool
    reasons: list[str]
    summary: pd.DataFrame | None


def side_dir(run_path: Path, label: str) -> Path:
    runs.check_name("side label", label)
    return Path(run_path) / SIDES / label


def run_side(run_path: Path, spec: endpoints.EndpointSpec, params: QualityParams,
             log: Callable[[str], None] = print) -> SideResult:
    """Canaries, then every item of every benchmark ``replicates`` times, then scoring; all into the side's dir."""
    out = side_dir(run_path, spec.label)
    out.mkdir(parents=True, exist_ok=False)
    model = runner.resolve_model(spec)
    items = {b: subsets.subset_items(b, params.datasets, params.allow_download, params.limit)
             for b in params.benchmarks}
    info: dict[str, Any] = {
        "label": spec.label, "endpoint": spec.record(), "model": model, "benchmarks": params.benchmarks,
        "replicates": params.replicates, "limit": params.limit,
        "max_tokens": {b: params.max_tokens.get(b, bench.DEFAULT_MAX_TOKENS[b]) for b in params.benchmarks},
        "subsets": {b: {"n_subset": subsets.load(b).n, "seed": subsets.load(b).seed, "items_used": len(v),
                        "ids": [it.item_id for it in v]} for b, v in items.items()},
        "data": {b: data.provenance(b) for b in params.benchmarks}, "protocol": bench.protocol(),
        "started_at": runs.utc_now(),
    }
    report = canaries.run_canaries(spec, model, continuation_needed="humaneval" in params.benchmarks)
    runs.atomic_write_json(out / "canaries.json", report.to_json())
    info.update(valid=report.valid, invalid_reasons=report.reasons)
    log(f"side {spec.label}: canaries {'passed' if report.valid else 'FAILED: ' + '; '.join(report.reasons)}")
    if report.valid or params.on_canary_failure == "continue":
        all_items = [it for b in params.benchmarks for it in items[b]]
        done = {"n": 0}
        total = len(all_items) * params.replicates

        def progress(rec: dict[str, Any]) -> None:
            done["n"] += 1
            if done["n"] % 25 == 0 or done["n"] == total:
                log(f"side {spec.label}: {done['n']}/{total} items answered")

        with runs.EventLog(out / "items.jsonl") as ev:
            runner.run_items(spec, model, all_items, params.replicates, info["max_tokens"], ev, progress)
    info["ended_at"] = runs.utc_now()
    runs.atomic_write_json(out / "side.json", info)
    summary = score_side(out, params.datasets, params.allow_download, params.exec_timeout_s)
    return SideResult(out, report.valid, report.reasons, summary)


def score_side(path: Path, datasets: str | None = None, allow_download: bool = False,
               exec_timeout_s: float = humaneval.DEFAULT_TIMEOUT_S) -> pd.DataFrame | None:
    """(Re)compute a side's scores from its ``items.jsonl``; an invalid side is never scored."""
    path = Path(path)
    info = json.loads((path / "side.json").read_text(encoding="utf-8"))
    record: dict[str, Any] = {"scored": False, "scored_at": runs.utc_now()}
    if not info.get("valid"):
        record["reason"] = "the canaries failed: " + "; ".join(info.get("invalid_reasons") or [])
        runs.atomic_write_json(path / "scoring.json", record)
        return None
    records = runs.read_events(path / "items.jsonl")
    problems = scoring.problems_for(info["benchmarks"], datasets, allow_download)
    if "humaneval" in info["benchmarks"]:
        check = humaneval.cached_self_check(exec_timeout_s)
        record["humaneval_self_check"] = check.to_json()
        if not check.ok:
            runs.atomic_write_json(path / "scoring.json", record | {"reason": "HumanEval self-check failed"})
            raise ProducerError(f"the HumanEval scorer failed its self-check ({check.canonical_passed}/"
                                f"{check.problems} canonical solutions passed, {check.empty_passed} empty "
                                f"completions passed); nothing is scored. See {path / 'scoring.json'}")
    if "ifeval" in info["benchmarks"]:
        ifeval.self_test()
        record["ifeval_deviations"] = list(ifeval.DEVIATIONS)
    scores, instructions = scoring.score_records(records, problems, exec_timeout_s)
    summary = scoring.summarize(scores)
    for name, frame in (("scores.csv", scores), ("ifeval_instructions.csv", instructions), ("summary.csv", summary)):
        runs.atomic_write_text(path / name, frame.to_csv(index=False))
    record.update(scored=True, items=len(scores), exec_timeout_s=exec_timeout_s,
                  primary_metric=scoring.PRIMARY_METRIC)
    runs.atomic_write_json(path / "scoring.json", record)
    return summary


def read_scores(path: Path) -> pd.DataFrame:
    path = Path(path)
    scoring_json = path / "scoring.json"
    if not scoring_json.is_file() or not json.loads(scoring_json.read_text())["scored"]:
        reason = json.loads(scoring_json.read_text()).get("reason") if scoring_json.is_file() else "not scored"
        raise InputError(f"side {path} has no scores ({reason}); an invalid side cannot be compared")
    return pd.read_csv(path / "scores.csv", dtype={"item_id": str})


def write_comparison(run_path: Path, reference: Path, local: Path, resamples: int, seed: int,
                     note: str | None = None) -> pd.DataFrame:
    records, table, items = cmp.compare(read_scores(reference), read_scores(local), resamples, seed)
    sides = {role: json.loads((p / "side.json").read_text()) for role, p in (("reference", reference),
                                                                              ("local", local))}
    doc = {
        "reference": {"dir": str(Path(reference).relative_to(run_path)), "label": sides["reference"]["label"],
                      "model": sides["reference"]["model"], "url": sides["reference"]["endpoint"]["url"],
                      "kind": sides["reference"]["endpoint"]["kind"]},
        "local": {"dir": str(Path(local).relative_to(run_path)), "label": sides["local"]["label"],
                  "model": sides["local"]["model"], "url": sides["local"]["endpoint"]["url"],
                  "kind": sides["local"]["endpoint"]["kind"]},
        "same_endpoint": sides["reference"]["endpoint"]["url"] == sides["local"]["endpoint"]["url"]
        and sides["reference"]["model"] == sides["local"]["model"],
        "note": note,
        "replicates": {role: int(info["replicates"]) for role, info in sides.items()},
        "resamples": resamples,
        "seed": seed,
        "notation": "a both right, b only the reference right, c only local right, d both wrong; "
                    "delta = (c - b) / n = local minus reference",
        "benchmarks": records,
    }
    runs.atomic_write_json(Path(run_path) / COMPARISON_JSON, doc)
    runs.atomic_write_text(Path(run_path) / COMPARISON_CSV, table.to_csv(index=False))
    runs.atomic_write_text(Path(run_path) / PAIRED_ITEMS, items.to_csv(index=False))
    return table


def local_spec(base_url: str, params: QualityParams) -> endpoints.EndpointSpec:
    return endpoints.EndpointSpec(**({"label": "local", "kind": "vllm"} | params.local | {"url": base_url}))


def reference_spec(base_url: str, params: QualityParams) -> tuple[endpoints.EndpointSpec, bool]:
    """The reference side, and whether it is just the local server again (the embedded campaign has no API)."""
    if params.reference:
        if "url" not in params.reference:
            raise InputError("the reference endpoint needs a url (e.g. https://api.deepseek.com)")
        return endpoints.EndpointSpec(**({"label": "reference", "kind": "deepseek"} | params.reference)), False
    return local_spec(base_url, params).model_copy(update={"label": "reference"}), True


def run_experiment(run: runs.Run, base_url: str, params: QualityParams,
                   log: Callable[[str], None] = print) -> pd.DataFrame:
    """Both sides, scored and compared, into ``run``; raises ProducerError (the run kept) when a side is invalid."""
    ref, same = reference_spec(base_url, params)
    loc = local_spec(base_url, params)
    meta: dict[str, Any] = {"reference": ref.record(), "local": loc.record(), "reference_is_local": same,
                            "protocol": bench.protocol(), "valid": None}

    def record(**fields: Any) -> None:
        # In QUALITY_JSON as well as the manifest: a file in the run is hashed and cannot be lost when another
        # process rewrites the manifest.
        meta.update(fields)
        runs.atomic_write_json(run.path / QUALITY_JSON, meta)
        run.update(quality=dict(meta))

    record()
    results = {role: run_side(run.path, spec, params, log) for role, spec in (("reference", ref), ("local", loc))}
    invalid = {role: r.reasons for role, r in results.items() if not r.valid}
    if invalid:
        record(valid=False, invalid=invalid)
        raise ProducerError(f"the canaries failed ({invalid}); the run is kept at {run.path}, marked invalid and "
                            "not scored")
    note = ("the reference is the local server again: no vendor API in this campaign, so the comparison is an A/A "
            "check of the pipeline") if same else None
    table = write_comparison(run.path, results["reference"].path, results["local"].path, params.resamples,
                             params.seed, note)
    record(valid=True)
    return table


def copy_side(src: Path, run_path: Path, role: str) -> Path:
    """Copy a scored side into a comparison run under its role's name."""
    src = Path(src)
    if (src / SIDES).is_dir():  # a run directory holding exactly one side
        inner = [p for p in (src / SIDES).iterdir() if p.is_dir()]
        if len(inner) != 1:
            raise InputError(f"{src} holds {len(inner)} sides; name the side directory (…/sides/<label>)")
        src = inner[0]
    if not (src / "side.json").is_file():
        raise InputError(f"{src} is not a quality side (no side.json); pass a run of `offload-lab quality run`")
    read_scores(src)  # refuses an invalid or unscored side before anything is copied
    dest = side_dir(run_path, role)
    shutil.copytree(src, dest)
    return dest
