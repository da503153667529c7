"""The ``quality`` experiment: run each side, score it, compare them; and the pieces the CLI runs alone.

A run directory holds one directory per side, ``sides/<label>/``:

- ``side.json``: the endpoint's settings (the API key's variable name, never the key), the model, benchmarks,
  subsets and items used, data provenance, the prompt protocol, and whether the side is valid;
- ``canaries.json``: the canary checks with their requests and responses;
- ``items.jsonl``: one raw record per item and replicate (request, response, attempts, status);
- ``scores.csv``, ``ifeval_instructions.csv``, ``summary.csv``, ``scoring.json``: derived from ``items.jsonl``.

A comparison run (experiment ``quality``) also holds ``comparison.json`` (everything), ``comparison.csv`` (one row
per benchmark), ``paired_items.csv`` (every paired item, flips marked), ``agreement.csv`` and
``agreement_items.csv`` (greedy answers token for token: :mod:`offload_lab.quality.agreement`) and ``quality.json``
(both endpoints' settings and whether the run is valid). ``offload-lab quality run`` writes a single side into a run of
experiment ``quality-side``; ``offload-lab quality compare`` copies two sides into a new ``quality`` run and compares
them.

The campaign runs one server at a time, so two local servers (the embedded campaign's bfloat16 and float32 stacks) are
compared in three runs of the same notebook: ``side: local`` on one server and ``side: reference`` on the other (each
a run holding one side, measured on the campaign's current server), then ``compare_runs`` with no server, which copies
the latest ``ok`` run of each named experiment into a comparison run. A vendor API is still compared in one run
(``reference`` with its url), both sides at once.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import pandas as pd
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from offload_lab.core import runs
from offload_lab.core.bounds import MAX_SECONDS, Tokens
from offload_lab.core.errors import InputError, ProducerError
from offload_lab.quality import agreement as agree
from offload_lab.quality import benchmarks as bench, canaries, compare as cmp, data, endpoints, humaneval, ifeval, paired
from offload_lab.quality import runner, scoring, subsets

SIDES = "sides"
COMPARISON_JSON = "comparison.json"
COMPARISON_CSV = "comparison.csv"
PAIRED_ITEMS = "paired_items.csv"
QUALITY_JSON = "quality.json"
AGREEMENT_CSV = "agreement.csv"
AGREEMENT_ITEMS = "agreement_items.csv"
ROLES = ("reference", "local")
# A side's progress line every this share of its items (the campaign's display reads "side X: N/M items").
PROGRESS_STEP = 0.05


class QualityParams(BaseModel):
    """Parameters of the ``quality`` experiment (the notebook's, and the campaign file's)."""

    model_config = ConfigDict(extra="forbid")

    benchmarks: list[str] = Field(default_factory=lambda: list(data.BENCHMARKS),
                                  description="gsm8k, ifeval, humaneval, comma-separated, or all")
    limit: int | None = Field(None, ge=1, description="first N items of each fixed subset (a smoke run); None: all")
    replicates: int = Field(2, ge=1, description="times each side answers each item; 2 gives the noise floor")
    max_tokens: dict[str, Tokens] = Field(default_factory=dict, description="per benchmark; default 1024/1280/1024")
    local: dict[str, Any] = Field(default_factory=dict, description="EndpointSpec fields for the local side")
    reference: dict[str, Any] | None = Field(
        None, description="EndpointSpec fields (with url) for the reference API; None: the local server again")
    datasets: str | None = Field(
        None, description="dataset directory overriding the shipped GSM8K/IFEval files; default $OFFLOAD_LAB_DATASETS")
    allow_download: bool = Field(False, description="download a data file the package does not ship")
    resamples: int = Field(paired.DEFAULT_RESAMPLES, ge=100, description="bootstrap resamples")
    # bootstrap_seed, not seed: a quality side's endpoint has a sampling seed (EndpointSpec.seed); the old name loads
    bootstrap_seed: int = Field(0, ge=0, validation_alias=AliasChoices("bootstrap_seed", "seed"),
                                description="bootstrap seed")
    exec_timeout_s: float = Field(humaneval.DEFAULT_TIMEOUT_S, gt=0, le=MAX_SECONDS, allow_inf_nan=False,
                                  description="seconds a HumanEval program may run (a timeout is retried once with "
                                              "twice)")
    on_canary_failure: Literal["stop", "continue"] = Field(
        "stop", description="stop: skip the items of an invalid side; continue: send them, keep them unscored")
    side: Literal["both", "reference", "local"] = Field(
        "both", description="reference or local: answer only that side, on the campaign's server (url), into "
                            "this run; both: the two sides and their comparison")
    compare_runs: dict[str, str] | None = Field(
        None, description="{reference: EXPERIMENT, local: EXPERIMENT}: no server; compare the latest ok side runs "
                          "of those experiments of this campaign")

    @field_validator("benchmarks")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [b for b in v if b not in data.BENCHMARKS]
        if unknown or not v:
            raise ValueError(f"benchmarks must be among {list(data.BENCHMARKS)}, got {v}")
        return list(dict.fromkeys(v))

    @field_validator("compare_runs")
    @classmethod
    def _roles(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is not None and set(v) != set(ROLES):
            raise ValueError(f"compare_runs names the experiment of each role, {list(ROLES)}; got {sorted(v)}")
        if v is not None and len(set(v.values())) < len(v):
            raise ValueError(f"compare_runs compares a run with itself (both roles name {sorted(v.values())[0]}); "
                             "name the two experiments whose side runs to compare")
        return v

    @field_validator("max_tokens")
    @classmethod
    def _benchmarks_of_max_tokens(cls, v: dict[str, int]) -> dict[str, int]:
        unknown = [b for b in v if b not in data.BENCHMARKS]
        if unknown:
            raise ValueError(f"max_tokens names {unknown}; give a count for some of {list(data.BENCHMARKS)}")
        return v

    @model_validator(mode="after")
    def _one_mode(self) -> "QualityParams":
        if self.compare_runs is not None and self.side != "both":
            raise ValueError("compare_runs compares two side runs; it cannot answer a side itself (leave out side)")
        return self

    def reads_experiments(self) -> list[str]:
        """The campaign experiments whose runs this one reads: the side runs a comparison copies (the campaign runner
        skips it when one of them failed)."""
        return [self.compare_runs[role] for role in ROLES] if self.compare_runs is not None else []


@dataclass
class SideResult:
    path: Path
    valid: bool
    reasons: list[str]
    summary: pd.DataFrame | None


def data_record(params: QualityParams) -> dict[str, dict[str, str]]:
    """Per benchmark: what its data is (source, commit, sha256, licence) and where this run reads it from (shipped,
    directory or download), each file checked as it is found."""
    return {b: data.provenance(b) | data.origin(b, params.datasets, params.allow_download) for b in params.benchmarks}


def side_dir(run_path: Path, label: str) -> Path:
    runs.check_name("side label", label)
    return Path(run_path) / SIDES / label


def run_side(run_path: Path, spec: endpoints.EndpointSpec, params: QualityParams,
             log: Callable[[str], None] = print, server: dict[str, Any] | None = None) -> SideResult:
    """Canaries, then every item of every benchmark ``replicates`` times, then scoring; all into the side's dir.

    ``server`` (the run manifest's server record: boot run, stack, variant) goes into ``side.json``, so that two
    servers behind the same URL, one after the other, are told apart."""
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
        "data": data_record(params), "protocol": bench.protocol(),
        "server": _server_words(server), "started_at": runs.utc_now(),
    }
    report = canaries.run_canaries(spec, model, continuation_needed="humaneval" in params.benchmarks)
    runs.atomic_write_json(out / "canaries.json", report.to_json())
    info.update(valid=report.valid, invalid_reasons=report.reasons)
    log(f"side {spec.label}: canaries {'passed' if report.valid else 'FAILED: ' + '; '.join(report.reasons)}")
    if report.valid or params.on_canary_failure == "continue":
        all_items = [it for b in params.benchmarks for it in items[b]]
        done = {"n": 0}
        total = len(all_items) * params.replicates
        step = max(1, round(total * PROGRESS_STEP))

        def progress(rec: dict[str, Any]) -> None:
            done["n"] += 1
            if done["n"] % step == 0 or done["n"] == total:
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


def _server_words(server: dict[str, Any] | None) -> dict[str, Any] | None:
    """What tells one server from another behind the same URL: its boot run, stack file, variant and dtype."""
    if not server:
        return None
    stack = server.get("stack") or {}
    spec = stack.get("spec") or {}
    args = list((spec.get("server") or {}).get("args") or [])
    flags = (spec.get("server") or {}).get("flags") or {}
    dtype = flags.get("dtype") or (args[args.index("--dtype") + 1] if "--dtype" in args[:-1] else None)
    return {"boot_run": server.get("boot_run"), "stack": spec.get("name") or stack.get("file"),
            "variant": server.get("variant"), "dtype": dtype}


def _side_doc(run_path: Path, path: Path, info: dict[str, Any]) -> dict[str, Any]:
    return {"dir": str(Path(path).relative_to(run_path)), "label": info["label"], "model": info["model"],
            "url": info["endpoint"]["url"], "kind": info["endpoint"]["kind"], "server": info.get("server")}


def _same_endpoint(sides: dict[str, dict[str, Any]]) -> bool:
    ref, loc = sides["reference"], sides["local"]
    if ref["endpoint"]["url"] != loc["endpoint"]["url"] or ref["model"] != loc["model"]:
        return False
    # The same URL and model one after the other can be two servers: the boot runs say.
    boots = [(s.get("server") or {}).get("boot_run") for s in (ref, loc)]
    return None in boots or boots[0] == boots[1]


def _item_records(side: Path) -> list[dict[str, Any]]:
    # A side rebuilt from scores alone (no raw records) has no answers to compare: its agreement table is empty.
    path = Path(side) / "items.jsonl"
    return runs.read_events(path) if path.is_file() else []


def write_comparison(run_path: Path, reference: Path, local: Path, resamples: int, seed: int,
                     note: str | None = None) -> pd.DataFrame:
    records, table, items = cmp.compare(read_scores(reference), read_scores(local), resamples, seed)
    sides = {role: json.loads((p / "side.json").read_text()) for role, p in (("reference", reference),
                                                                              ("local", local))}
    agreement, agreed = agree.agreement(*(_item_records(p) for p in (reference, local)))
    doc = {
        "reference": _side_doc(run_path, reference, sides["reference"]),
        "local": _side_doc(run_path, local, sides["local"]),
        "same_endpoint": _same_endpoint(sides),
        "note": note,
        "replicates": {role: int(info["replicates"]) for role, info in sides.items()},
        "resamples": resamples,
        "seed": seed,
        "notation": "a both right, b only the reference right, c only local right, d both wrong; "
                    "delta = (c - b) / n = local minus reference",
        "benchmarks": records,
        "agreement": agreement.to_dict(orient="records"),
    }
    runs.atomic_write_json(Path(run_path) / COMPARISON_JSON, doc)
    runs.atomic_write_text(Path(run_path) / COMPARISON_CSV, table.to_csv(index=False))
    runs.atomic_write_text(Path(run_path) / PAIRED_ITEMS, items.to_csv(index=False))
    runs.atomic_write_text(Path(run_path) / AGREEMENT_CSV, agreement.to_csv(index=False))
    runs.atomic_write_text(Path(run_path) / AGREEMENT_ITEMS, agreed.to_csv(index=False))
    return table


def local_spec(url: str, params: QualityParams) -> endpoints.EndpointSpec:
    return endpoints.EndpointSpec(**({"label": "local", "kind": "vllm"} | params.local | {"url": url}))


def reference_spec(url: str, params: QualityParams) -> tuple[endpoints.EndpointSpec, bool]:
    """The reference side, and whether it is just the local server again (a hand run with no reference)."""
    if params.reference:
        if "url" not in params.reference:
            raise InputError("the reference endpoint needs a url (e.g. https://api.deepseek.com)")
        return endpoints.EndpointSpec(**({"label": "reference", "kind": "deepseek"} | params.reference)), False
    return local_spec(url, params).model_copy(update={"label": "reference"}), True


def side_spec(url: str, params: QualityParams) -> endpoints.EndpointSpec:
    """The one side a ``side:`` run answers, on the campaign's current server: that role's endpoint fields, the
    campaign's URL unless they name one."""
    fields = params.local if params.side == "local" else (params.reference or {})
    return endpoints.EndpointSpec(**({"kind": "vllm", "url": url} | fields | {"label": params.side}))


class _Record:
    """``quality.json`` and the manifest's ``quality`` entry, kept equal. A file in the run is hashed and cannot be
    lost when another process rewrites the manifest."""

    def __init__(self, run: runs.Run, **meta: Any):
        self.run, self.meta = run, {"protocol": bench.protocol(), "valid": None, **meta}
        self(**{})

    def __call__(self, **fields: Any) -> None:
        self.meta.update(fields)
        runs.atomic_write_json(self.run.path / QUALITY_JSON, self.meta)
        self.run.update(quality=dict(self.meta))


def run_experiment(run: runs.Run, url: str | None, params: QualityParams,
                   log: Callable[[str], None] = print) -> pd.DataFrame:
    """The run's part of the experiment (``params.side`` / ``params.compare_runs``); raises ProducerError (the run
    kept) when a side is invalid. Returns the comparison table, or a side's score summary."""
    if params.compare_runs is not None:
        return compare_side_runs(run, params, log)
    if not url:
        raise InputError("the quality experiment needs url (the server to ask), unless compare_runs names "
                         "two side runs to compare")
    server = (run.manifest.get("server") or {}) | {"stack": run.manifest.get("stack")}
    if params.side != "both":
        spec = side_spec(url, params)
        record = _Record(run, side=params.side, endpoint=spec.record(), server=_server_words(server),
                         data=data_record(params))
        result = run_side(run.path, spec, params, log, server=server)
        if not result.valid:
            record(valid=False, invalid={params.side: result.reasons})
            raise ProducerError(f"the canaries failed ({result.reasons}); the run is kept at {run.path}, marked "
                                "invalid and not scored")
        record(valid=True)
        return result.summary if result.summary is not None else pd.DataFrame()
    ref, same = reference_spec(url, params)
    loc = local_spec(url, params)
    record = _Record(run, reference=ref.record(), local=loc.record(), reference_is_local=same,
                     data=data_record(params))
    results = {role: run_side(run.path, spec, params, log, server=server)
               for role, spec in (("reference", ref), ("local", loc))}
    invalid = {role: r.reasons for role, r in results.items() if not r.valid}
    if invalid:
        record(valid=False, invalid=invalid)
        raise ProducerError(f"the canaries failed ({invalid}); the run is kept at {run.path}, marked invalid and "
                            "not scored")
    note = ("the reference is the local server again: an A/A check of the pipeline, not a comparison") if same else None
    table = write_comparison(run.path, results["reference"].path, results["local"].path, params.resamples,
                             params.bootstrap_seed, note)
    record(valid=True)
    return table


def holds_comparison(run_path: Path) -> bool:
    """Whether a run holds a comparison (and so the section's figures can be drawn from it)."""
    return (Path(run_path) / COMPARISON_CSV).is_file()


def latest_side_run(campaign_dir: Path, experiment: str) -> Path:
    """The newest ``ok`` run of ``experiment`` under ``campaign_dir`` that holds one scored side."""
    folder = Path(campaign_dir) / experiment
    found = [d for d in sorted(folder.iterdir()) if d.is_dir()] if folder.is_dir() else []
    for d in reversed(found):
        manifest = runs.load_manifest(d) if (d / runs.MANIFEST).is_file() else {}
        if manifest.get("outcome") == "ok" and (d / SIDES).is_dir():
            return d
    raise InputError(f"compare_runs: no ok run of experiment {experiment} under {campaign_dir} holds a side; run "
                     f"the side first (side: reference or local) or correct the experiment's name")


def compare_side_runs(run: runs.Run, params: QualityParams, log: Callable[[str], None] = print) -> pd.DataFrame:
    """Copy the latest ok side run of each role's experiment into ``run`` and compare them (no server)."""
    assert params.compare_runs is not None
    campaign_dir = run.path.parent.parent
    sources = {role: latest_side_run(campaign_dir, params.compare_runs[role]) for role in ROLES}
    manifests = {role: runs.load_manifest(p) for role, p in sources.items()}
    record = _Record(run, compared_runs={role: {"experiment": params.compare_runs[role], "run": str(p),
                                                "session": manifests[role].get("session")}
                                         for role, p in sources.items()})
    dirs = {role: copy_side(p, run.path, role) for role, p in sources.items()}
    sessions = {m.get("session") for m in manifests.values()}
    note = None if len(sessions) == 1 else "the two sides were measured in different campaign sessions"
    for role in ROLES:
        log(f"side {role}: {params.compare_runs[role]} run {sources[role].name}")
    table = write_comparison(run.path, dirs["reference"], dirs["local"], params.resamples, params.bootstrap_seed, note)
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
