"""The published study's figures as data: transcribed once, stored as a run, read back by the analyses.

``configs/published/study.yaml`` holds every figure of the published summary, with its unit, its section and the
published words it comes from; usage profiles (``configs/profiles/*.yaml``) hold E11 as the seat analysis reads it.
Its companions (``also``: ``configs/published/derived.yaml``, the study's derived figures and the blog's scores;
``configs/published/community-memory-math.yaml``, the community page's table) are transcriptions of other sources in
the same form, each with its own source and sha256; the run holds them all, each figure naming its source.
A figure may carry the number as printed (``as_published``, which gives its rounding), a qualifier (``about``,
``at_most``, ``range``), or ``status: not_published`` with no value: the summary says the figure exists and is not
given, and nothing downstream may stand in for it.
Experiment ``published`` (:func:`transcribe`) copies them into a run directory: ``figures.json``, one CSV per table
and ``profile-<name>.json`` per profile, with ``provenance.json`` and the manifest's ``provenance`` saying they were
transcribed from the published summary, naming the source, its sha256 and every file's sections. Nothing is derived
here: seats, pods, money and every other derived figure are computed later, by the ``capacity``, ``cost`` and
``ref_*`` experiments, from these files.

The sources' texts ship with the package (``offload_lab/resources/published/``, :func:`source_text`): a
transcription's ``source`` names its file there, and its sha256 must still be the one the transcription was checked
against; a changed source stops the run, since the figures may no longer match it. A source named by a path that is
not here (a transcription of another study) is transcribed all the same with ``source_checked: false``.

Each figure says who published it (``by``: the study, the blog, an outside estimate the blog quotes, the community
page) and whether its ``published`` words are the source's (``words: source``, each part a substring of the
source's words, :func:`source_words`) or the transcription's summary of it (``words: transcription``: never printed
as the source's words).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from importlib import resources

from offload_lab.core import inputs, runs
from offload_lab.core.errors import InputError
from offload_lab.seats.profile import UsageProfile, load_profile, parse_profile

EXPERIMENT = "published"
FIGURES = "figures.json"
PROVENANCE = "provenance.json"
PROVENANCE_KIND = "transcribed from the published summary"
SOURCES_PACKAGE = "offload_lab.resources"  # resources/published/<file>: the sources' texts, shipped
SOURCES_DIR = "published"
# Who published a figure. The study's own figures; the blog's; an outside estimate the blog quotes; the community page.
BY = ("the study", "the blog", "an outside estimate the blog quotes", "the community page")
# Parts of a source file that are its transcriber's notes, not the source's words (resources/published/README.md):
# sections under these headings, paragraphs that start so, and blocks that start so (to the next heading).
NOTE_HEADINGS = ("Inconsistencies inside the sources",)
NOTE_PARAGRAPHS = ("A measurement study served", "Units as published", "The published seat counts",
                   "`published-study.md` holds", 'The "best home rig" page')
NOTE_BLOCKS = ("Notes for whoever reproduces it",)


Scalar = float | int | str


class Figure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    value: Scalar | list[Scalar] | None
    unit: str
    section: str
    published: str = Field(min_length=1, description="the published words the value comes from")
    as_published: str | None = Field(None, description="the number as printed, e.g. '7.1%': gives its rounding")
    qualifier: Literal["exact", "about", "at_most", "range", "approximate-words"] = "exact"
    status: Literal["published", "not_published"] = "published"
    by: Literal[BY] = Field("the study", description="who published the figure")  # type: ignore[valid-type]
    words: Literal["source", "transcription"] = Field(
        "source", description="source: `published` quotes the source; transcription: it is the transcriber's summary")

    @model_validator(mode="after")
    def _value_matches_status(self) -> "Figure":
        # A figure the summary says is not published must not carry a value: nothing may stand in for it.
        if (self.value is None) != (self.status == "not_published"):
            raise ValueError(f"figure {self.key}: a value is given exactly when status is 'published'")
        if self.as_published is not None and self.as_published not in self.published:
            raise ValueError(f"figure {self.key}: as_published {self.as_published!r} is not in its published words")
        return self


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid")

    section: str
    published: str
    columns: list[str] = Field(min_length=1)
    rows: list[list[Scalar | None]] = Field(min_length=1)
    # Columns that hold offload-lab's reading of a published cell (e.g. a boot outcome's name), not published words.
    labels: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _rectangular(self) -> "Table":
        bad = [i for i, r in enumerate(self.rows) if len(r) != len(self.columns)]
        if bad:
            raise ValueError(f"rows {bad} do not have one value per column {self.columns}")
        unknown = sorted(set(self.labels) - set(self.columns))
        if unknown:
            raise ValueError(f"labels {unknown} are not columns {self.columns}")
        return self


class Transcription(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    source_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    profiles: list[str] = Field(default_factory=list)
    # Companion transcriptions of other sources (the study's derived figures, the community page), copied into the
    # same run: one published run holds every published figure, each with the source it was transcribed from.
    also: list[str] = Field(default_factory=list)
    figures: list[Figure] = Field(min_length=1)
    tables: dict[str, Table] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique(self) -> "Transcription":
        keys = [f.key for f in self.figures]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"figure keys {dup} appear more than once")
        return self


def load_transcription(path: Path | str) -> Transcription:
    path = Path(path)
    if not path.exists():
        raise InputError(f"transcription {path} does not exist (the reference one is configs/published/study.yaml)")
    # The one YAML reader: a directory or FIFO named for what it is, duplicate keys refused, size bounded.
    data = inputs.read_yaml(path, "transcription")
    try:
        return Transcription.model_validate(data)
    except ValidationError as e:
        details = "\n".join(f"  {'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise InputError(f"transcription {path} is not valid:\n{details}") from e


def _resolve(root: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else (root / q)


def shipped_source(source: str) -> Path | None:
    """The package's copy of a source (``resources/published/<its file name>``), or None."""
    p = Path(str(resources.files(SOURCES_PACKAGE) / SOURCES_DIR / Path(source).name))
    return p if p.is_file() else None


def source_text(source: str, root: Path | None = None) -> str:
    """A source's text: the file ``source`` names (relative to ``root``), else the package's copy."""
    src = _resolve(Path(root), source) if root is not None else None
    found = src if src is not None and src.is_file() else shipped_source(source)
    if found is None:
        raise InputError(f"the published source {source} is neither at that path nor shipped in the package "
                         f"({SOURCES_PACKAGE}/{SOURCES_DIR})")
    return found.read_text(encoding="utf-8")


def source_words(text: str) -> str:
    """A source file's text less its transcriber's notes (NOTE_PARAGRAPHS, and the parts under NOTE_HEADINGS, to the
    next heading of the same level or above): what a figure's ``published`` words must be quoted from."""
    kept: list[str] = []
    skip_level: int | None = None
    starts, note = True, False  # at the start of a paragraph; in a note paragraph
    for line in text.splitlines():
        m = re.match(r"^(#+)\s+(.*)", line)
        if m:
            level = len(m[1])
            if skip_level is not None and level <= skip_level:
                skip_level = None
            if any(m[2].startswith(h) for h in NOTE_HEADINGS):
                skip_level = level
            elif level >= 2 and skip_level is None:  # the source's own section headings (not the file's title)
                kept.append(m[2])
            starts = True
            continue
        if not line.strip():
            starts = True
            continue
        if starts:
            note = line.lstrip().startswith(NOTE_PARAGRAPHS)
            if line.lstrip().startswith(NOTE_BLOCKS):
                skip_level = 6  # to the next heading
            starts = False
        if skip_level is None and not note:
            kept.append(line)
    return "\n".join(kept)


def check_source(t: Transcription, root: Path) -> bool:
    """True when the source is here (at its path, or shipped in the package) and unchanged, False when it is
    neither; InputError if changed."""
    src = _resolve(root, t.source).resolve()
    if not src.is_file():
        src = shipped_source(t.source)
    if src is None:
        return False
    actual = runs.sha256_file(src)
    if actual != t.source_sha256:
        raise InputError(
            f"the published summary {src} has changed since it was transcribed (sha256 {actual[:12]}… is not the "
            f"recorded {t.source_sha256[:12]}…): check every figure in the transcription against it, then record "
            "the new sha256"
        )
    return True


def transcribe(run: runs.Run, transcription: Path | str, root: Path) -> dict[str, Any]:
    """Write the transcription's figures, tables and profiles (and those of its companions, ``also``) into ``run``
    and record their provenance."""
    tpath = _resolve(root, str(transcription))
    t = load_transcription(tpath)
    parts = [(str(transcription), tpath, t)]
    for other in t.also:
        opath = _resolve(root, other)
        o = load_transcription(opath)
        if o.also or o.profiles:
            raise InputError(f"transcription {other} (listed under `also` in {tpath.name}) lists companions or "
                             "profiles of its own: only the main transcription does")
        parts.append((other, opath, o))
    checks = {path: check_source(part, root) for path, _, part in parts}
    checked = all(checks.values())
    figures, seen_tables = [], set()
    for path, _, part in parts:
        figures += [{**f.model_dump(), "source": part.source} for f in part.figures]
        dup = seen_tables & set(part.tables)
        if dup:
            raise InputError(f"transcription {path} repeats tables {sorted(dup)} of another transcription")
        seen_tables |= set(part.tables)
    keys = [f["key"] for f in figures]
    dup_keys = sorted({k for k in keys if keys.count(k) > 1})
    if dup_keys:
        raise InputError(f"figure keys {dup_keys} appear in more than one transcription ({', '.join(p for p, _, _ in parts)})")
    sections: dict[str, list[str]] = {FIGURES: sorted({f["section"] for f in figures})}
    run.write_json(FIGURES, figures)
    for _, _, part in parts:
        for name, table in part.tables.items():
            runs.check_name("table", name)
            run.write_table(f"{name}.csv", pd.DataFrame(table.rows, columns=table.columns))
            sections[f"{name}.csv"] = [table.section]
    profiles = {}
    for p in t.profiles:
        ppath = _resolve(root, p)
        prof = load_profile(ppath)
        if prof.provenance.kind != "published":
            raise InputError(f"profile {p} is listed in {tpath.name} but its provenance kind is "
                             f"{prof.provenance.kind!r}, not 'published'")
        fname = f"profile-{prof.name}.json"
        run.write_json(fname, prof.model_dump())
        sections[fname] = [prof.provenance.section or ""]
        profiles[fname] = {"path": p, "sha256": runs.sha256_file(ppath)}
    provenance = {
        "kind": PROVENANCE_KIND,
        "source": t.source,
        "source_sha256": t.source_sha256,
        "source_checked": checked,
        "sections": sections,
        "transcription": {"path": str(transcription), "sha256": runs.sha256_file(tpath)},
        "profiles": profiles,
        "also": [{"path": path, "sha256": runs.sha256_file(p), "source": part.source,
                  "source_sha256": part.source_sha256, "source_checked": checks[path]} for path, p, part in parts[1:]],
    }
    # Also as a file: the manifest then lists its sha256, so a claim or a check can cite the provenance like data.
    run.write_json(PROVENANCE, provenance)
    run.update(provenance=provenance)
    return provenance


@dataclass
class Published:
    """A finished ``published`` run, read back: figures by key, tables, profiles; with what was read."""

    run_dir: Path
    manifest: dict[str, Any]
    figures: dict[str, dict[str, Any]]
    data_root: Path | None = None

    @property
    def run_ref(self) -> str:
        """The run as <campaign>/<experiment>/<run id>: where it lies under any data root."""
        if self.data_root is not None:
            try:
                return self.run_dir.resolve().relative_to(Path(self.data_root).resolve()).as_posix()
            except ValueError:
                pass
        return str(self.run_dir)

    def value(self, key: str) -> Any:
        if key not in self.figures:
            raise InputError(f"{self.run_dir / FIGURES} has no published figure {key!r} "
                             f"(it has {sorted(self.figures)})")
        return self.figures[key]["value"]

    def number(self, key: str) -> float:
        v = self.value(key)
        if v is None:
            raise InputError(f"published figure {key!r} is not published (the summary says so): nothing can stand "
                             "in for it")
        if isinstance(v, (list, str)):
            raise InputError(f"published figure {key!r} is {v!r}, not a number")
        return float(v)

    def table(self, name: str) -> pd.DataFrame:
        p = self.run_dir / f"{name}.csv"
        if not p.is_file():
            raise InputError(f"{self.run_dir} has no published table {name}.csv")
        return pd.read_csv(p)

    def profile(self, name: str) -> UsageProfile:
        p = self.run_dir / f"profile-{name}.json"
        if not p.is_file():
            raise InputError(f"{self.run_dir} has no published profile {name!r} (profile-{name}.json)")
        return parse_profile(json.loads(p.read_text(encoding="utf-8")), where=str(p))

    def source_ref(self, file: str, key: str | None = None) -> dict[str, Any]:
        """Where a value came from, for the analysis's inputs.json: run, file, sha256, key and section."""
        rel = file
        meta = (self.manifest.get("files") or {}).get(rel) or {}
        ref = {"run": self.run_ref, "run_id": self.manifest.get("run_id"), "file": rel,
               "sha256": meta.get("sha256")}
        if key is not None:
            ref["key"] = key
            ref["section"] = self.figures.get(key, {}).get("section")
        return ref


def read_published(data_root: Path | str, campaign: str, experiment: str = EXPERIMENT) -> Published:
    """The latest ok ``published`` run of a campaign, verified against its manifest."""
    run_dir = runs.latest_run(data_root, campaign, experiment)
    if run_dir is None:
        raise InputError(
            f"campaign {campaign} has no finished run of experiment {experiment!r} under {data_root}: run "
            f"`offload-lab campaign run configs/campaigns/{campaign}.yaml --only {experiment}` first"
        )
    problems = runs.verify_run(run_dir)
    if problems:
        raise InputError(f"the published figures in {run_dir} do not match their manifest:\n  " + "\n  ".join(problems))
    manifest = runs.load_manifest(run_dir)
    if "provenance" not in manifest and (run_dir / PROVENANCE).is_file():
        manifest["provenance"] = json.loads((run_dir / PROVENANCE).read_text(encoding="utf-8"))
    if (manifest.get("provenance") or {}).get("kind") != PROVENANCE_KIND:
        raise InputError(f"{run_dir} does not say it was {PROVENANCE_KIND}; it cannot stand for published figures")
    figures = {f["key"]: f for f in json.loads((run_dir / FIGURES).read_text(encoding="utf-8"))}
    return Published(run_dir=run_dir, manifest=manifest, figures=figures, data_root=Path(data_root))
